"""Training stages: each builds from config, runs one loop, writes run records and a stage model."""
