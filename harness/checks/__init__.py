"""Checks made before anything heavy loads or is written: what a stage will need from outside the repository
(`needs.py`), the checks a command is refused by (`preflight.py`), each stage's GPU memory per process
(`memory_plan.py`) and `regbench doctor` (`doctor.py`). May import harness.config, harness.models, harness.runs,
harness.sampling (vLLM's presence) and harness.experiments.resources; nothing imports it but the stages, the
experiment runner and the command line."""
