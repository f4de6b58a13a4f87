"""The ground floor's seams: the draft-tree contract (`tree.py`), the Backend / Forward / Lanes
protocols (`backend.py`) and the Drafter protocol with DraftShape and Offer (`drafter.py`).

These modules import nothing of homespec but `homespec.errors` and `homespec.types`; every layer
above (speculative, backends, kernels, grammar, engine) meets the others here.
"""
