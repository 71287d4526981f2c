"""`tessera tune`: search the config keys that matter for the best filtered MRR on a
validation edge set, with an Optuna study kept beside the checkpoints.

`space` reads and checks the search space, `trial` trains and judges one trial, `study` runs
the Optuna study and keeps its result, `command` is what the CLI calls.
"""
