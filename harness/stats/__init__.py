"""Pure statistics (numpy and scipy only, no other part of the project): the decision rules of declared contrasts
(`decisions.py`, with the fixed-n rule's pieces in `fixed_n.py` and the anytime rule in `anytime.py`), shared by the
experiment runner (harness/experiments/sequential.py) and reports/."""
