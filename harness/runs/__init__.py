"""Run folders: what a run writes (manifest, JSONL records, checkpoints), who owns the folder, and when it is reused.
May import only harness.config and the standard library; every stage, the experiment runner and reports/ read it."""
