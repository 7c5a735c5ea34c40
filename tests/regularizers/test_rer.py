"""RER (REVA-PO Eq. 7-9): hand-computed betas, bounds, and properties."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from regularizers import RER, build_regularizer, rer_betas

BMIN, BBASE, BMAX = 0.05, 0.10, 0.12


def test_rer_hand_computed():
    # one group: h = (1, 2, 3) -> x = (0, 1/(2+eps), 2/(2+eps)) ~ (0, 0.5, 1)
    A = torch.tensor([[1.0, -1.0, 1.0], [-1.0, 1.0, -1.0]])
    h = torch.tensor([[1.0, 2.0, 3.0], [1.0, 2.0, 3.0]])
    beta = rer_betas(A, h, BMIN, BBASE, BMAX)
    x = torch.tensor([0.0, 1.0, 2.0]) / (2.0 + 1e-6)

    def pos(xi):  # Eq. 9, A > 0
        return BMIN + (BBASE - BMIN) * (1 - xi)

    def neg(xi):  # Eq. 9, A < 0
        return BBASE + (BMAX - BBASE) * xi

    expected = torch.stack(
        [torch.stack([pos(x[0]), neg(x[1]), pos(x[2])]), torch.stack([neg(x[0]), pos(x[1]), neg(x[2])])]
    )
    torch.testing.assert_close(beta, expected)
    # the extremes: A > 0 at the lowest entropy -> beta_base, at the highest -> ~beta_min; A < 0 mirrored
    assert beta[0, 0].item() == pytest.approx(BBASE)
    assert beta[0, 2].item() == pytest.approx(BMIN, abs=1e-6)
    assert beta[1, 0].item() == pytest.approx(BBASE)
    assert beta[1, 2].item() == pytest.approx(BMAX, abs=1e-6)
    assert beta[0, 1].item() == pytest.approx(0.11, abs=1e-6)  # A < 0, x = 0.5
    assert beta[1, 1].item() == pytest.approx(0.075, abs=1e-6)  # A > 0, x = 0.5


def test_rer_zero_advantage_is_base():
    beta = rer_betas(torch.zeros(2, 4), torch.rand(2, 4), BMIN, BBASE, BMAX)
    torch.testing.assert_close(beta, torch.full((2, 4), BBASE))


def test_rer_equal_entropies_give_base():
    # x = 0 for every member: A > 0 -> beta_base (1 - 0 = 1), A < 0 -> beta_base
    beta = rer_betas(torch.tensor([[1.0, -1.0, 0.0, 2.0]]), torch.full((1, 4), 0.7), BMIN, BBASE, BMAX)
    torch.testing.assert_close(beta, torch.full((1, 4), BBASE))


def test_rer_groups_are_independent():
    A = torch.tensor([[1.0, 1.0], [1.0, 1.0]])
    h = torch.tensor([[0.0, 1.0], [100.0, 101.0]])  # x depends only on the position within the group
    beta = rer_betas(A, h, BMIN, BBASE, BMAX)
    torch.testing.assert_close(beta[0], beta[1])


@pytest.mark.parametrize(
    "bounds", [(0.1, 0.05, 0.12), (0.05, 0.15, 0.12), (-0.01, 0.1, 0.12), (0.05, 0.1, 0.09)]
)
def test_rer_bound_errors_name_values(bounds):
    with pytest.raises(ValueError, match=r"beta_min=.*beta_base=.*beta_max="):
        rer_betas(torch.zeros(1, 2), torch.zeros(1, 2), *bounds)
    with pytest.raises(ValueError, match=str(bounds[0])):
        RER(*bounds)


def test_rer_regularizer():
    reg = build_regularizer("rer", beta_min=0.05, beta_base=0.1, beta_max=0.15)
    assert reg.needs_reference and reg.needs_reference_entropy
    beta = reg.betas(torch.tensor([[1.0, -1.0]]), torch.tensor([[2.0, 2.0]]))
    torch.testing.assert_close(beta, torch.full((1, 2), 0.1))
    with pytest.raises(ValueError, match="h_ref"):
        reg.betas(torch.zeros(1, 2), None)
    reg.after_step(0.3, 8)  # stateless
    assert reg.state_dict() == {}


floats = st.floats(min_value=-5.0, max_value=5.0, allow_nan=False, width=32)


@settings(max_examples=150, deadline=None)
@given(
    data=st.data(),
    b=st.integers(1, 3),
    g=st.integers(1, 6),
    bounds=st.lists(st.floats(0.0, 1.0, allow_nan=False), min_size=3, max_size=3).map(sorted),
)
def test_rer_bounded_and_monotone(data, b, g, bounds):
    bmin, bbase, bmax = bounds
    A = torch.tensor(data.draw(st.lists(floats, min_size=b * g, max_size=b * g))).reshape(b, g)
    h = torch.tensor(data.draw(st.lists(st.floats(0.0, 10.0, width=32), min_size=b * g, max_size=b * g)))
    h = h.reshape(b, g)
    beta = rer_betas(A, h, bmin, bbase, bmax)
    tol = 1e-6
    assert (beta >= bmin - tol).all() and (beta <= bmax + tol).all()
    # within a group, for same-sign advantages: A > 0 -> beta non-increasing in h; A < 0 -> non-decreasing
    for bi in range(b):
        for i in range(g):
            for j in range(g):
                if h[bi, i] <= h[bi, j]:
                    if A[bi, i] > 0 and A[bi, j] > 0:
                        assert beta[bi, i] >= beta[bi, j] - tol
                    if A[bi, i] < 0 and A[bi, j] < 0:
                        assert beta[bi, i] <= beta[bi, j] + tol
