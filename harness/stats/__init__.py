"""Pure statistics (numpy and scipy only, no other part of the project): the decision rules of declared contrasts
(`decisions.py`), shared by the experiment runner (harness/experiments/sequential.py) and reports/."""
