"""Leave-one-dataset-out (LODO), "F1 on roads never seen" (issue 55): `folds` (a campaign's
folds, their test-time variants and where each stands), `fold_stages` (the commands that train,
export and score a fold, run one after another), `kept_scores` (a fold's scores, kept beside
the repository's results so that a campaign outlives its machine) and `fold_tables` (the
tables, and the thresholds chosen for each held-out set on the others). ``python
bench/lodo.py`` is the command; configs/lodo.py holds the members, recipes and budgets it plans
from."""
