"""The contract between a preempted stage run and whoever runs it (the experiment runner, the Slurm executor).

A stage that is asked to stop (SIGTERM / SIGUSR1 from a scheduler) finishes its current step, writes a checkpoint
and exits with REQUEUE_EXIT_CODE; the runner then starts the same run again, which resumes from that checkpoint.
75 is EX_TEMPFAIL in sysexits.h: "try again later", distinct from a failure (1) and a usage error (2)."""

REQUEUE_EXIT_CODE = 75
