"""The Backend protocol's contract violations, and the one error type each raises on every backend
(homespec.contracts.backend): TreeError for a malformed tree or path, ContractError otherwise."""

from __future__ import annotations

import pytest

from homespec.errors import ContractError, HomespecError, TreeError

BAD_TREES = [  # (tokens, parents) that verify() must refuse before any forward
    ([], []),  # no root
    ([1, 2], [-1]),  # a parent missing
    ([1], [0]),  # the root has a parent
    ([1, 2], [-1, 1]),  # a node is its own parent
    ([1, 2, 3], [-1, 0, 3]),  # a parent after its child
]
BAD_PATHS = [[], [1], [0, 2, 1], [0, 7]]  # against the tree [-1, 0, 0]


def check_contract_errors(backend, prompt: list[int]) -> None:
    """Run every violation on `backend` and check the type raised, then that the backend still works."""
    backend.reset()
    backend.prefill(prompt)
    n = backend.n_past
    with pytest.raises(ContractError) as err:
        backend.commit([0])  # nothing verified
    assert type(err.value) is ContractError and err.value.hint
    for tokens, parents in BAD_TREES:
        with pytest.raises(TreeError) as err:
            backend.verify(tokens, parents)
        assert err.value.hint, (tokens, parents)
    assert backend.n_past == n
    backend.verify([1, 2, 3], [-1, 0, 0])
    for path in BAD_PATHS:
        with pytest.raises(TreeError):
            backend.commit(path)
    backend.commit([0, 2])  # the verified tree survived the refused commits
    assert backend.n_past == n + 2
    for k in (-1, n + 3):
        with pytest.raises(ContractError) as err:
            backend.rollback(k)
        assert type(err.value) is ContractError
    assert backend.n_past == n + 2
    # callers that caught either of the old types still catch these
    assert issubclass(TreeError, ContractError) and issubclass(ContractError, (HomespecError, ValueError))
    backend.reset()
