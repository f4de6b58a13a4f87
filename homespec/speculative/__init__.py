"""Speculative decoding: the drafting policy and verification.

    methods.py   one entry per --method, named as its drafter is; find_method, the one lookup
    guard.py     BatchGuard: the draft depth per step from measured pass costs and acceptance
    choice.py    the guard's per-lane choice among what the drafters offer
    tree.py      EAGLE-2's dynamic tree (build_dynamic_tree, grow_tree)
    drafters/    one drafter per method; verify.py, sampling.py: the target's verdict on a tree

The engine (homespec.engine) schedules lanes and runs the step; it never decides what to draft.
"""
