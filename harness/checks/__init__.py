"""Checks made before anything heavy loads or is written: what a stage will need from outside the repository
(`needs.py`), the checks a command is refused by (`preflight.py`), each stage's GPU memory per process
(`memory_plan.py`; `regbench doctor`, harness/cli/doctor.py, prints it). May import harness.config,
harness.models, harness.runs, harness.sampling (vLLM's presence) and rewards/ (the scorers' files); the stages, the
experiment runner and the command line import it."""
