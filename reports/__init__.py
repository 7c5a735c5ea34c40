"""Reports: tables (Markdown, LaTeX, CSV), figures (PNG, PDF) and one HTML page from run records.

Nothing in harness/, regularizers/ or rewards/ imports this package; it reads only run directories
(manifest.json, steps.jsonl, evals.jsonl, samples.jsonl, metrics.json, analysis_*.json) and an
experiment's index.json. Entry point: `reports.build.build_report(experiment_dir, out_dir)`.
"""
