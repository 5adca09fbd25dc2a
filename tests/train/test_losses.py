import torch
import torch.nn.functional as F

from dsonet.train.losses import (code_loss, contrastive_loss, delta_entropy, diversity_loss, expansion_loss,
                                 robust_loss, soft_delta_entropy)
from dsonet.train.metrics import n_attackers


def test_expansion_loss_is_zero_for_the_padded_input_itself():
    h = F.normalize(torch.randn(4, 8), dim=-1)
    assert expansion_loss(F.pad(h, (0, 24)), h).item() == 0.0
    assert expansion_loss(F.normalize(torch.randn(4, 32), dim=-1), h).item() > 0.5


def test_contrastive_loss_matches_the_infonce_formula():
    gen = torch.Generator().manual_seed(0)
    q, pos, neg = (F.normalize(torch.randn(*shape, generator=gen), dim=-1) for shape in ((3, 5), (3, 5), (3, 7, 5)))
    tau = 0.05
    s_pos = torch.exp((q * pos).sum(-1) / tau)
    s_neg = torch.exp(torch.einsum("bd,bkd->bk", q, neg) / tau).sum(-1)
    expected = -torch.log(s_pos / (s_pos + s_neg)).mean()
    torch.testing.assert_close(contrastive_loss(q, pos, neg, tau), expected, rtol=1e-4, atol=1e-4)


def test_soft_entropy_tracks_the_hard_entropy_and_has_a_gradient():
    e = F.normalize(torch.randn(16, 768), dim=-1).requires_grad_()
    soft, hard = soft_delta_entropy(e), delta_entropy(e)
    assert (soft - hard).abs().max() < 0.3  # bits; both over the same 64 bins
    soft.sum().backward()
    assert e.grad is not None and e.grad.abs().sum() > 0


def test_delta_entropy_is_zero_for_a_constant_vector_and_large_for_noise():
    const = torch.ones(2, 512) / 512**0.5
    assert delta_entropy(const).max().item() == 0.0
    assert delta_entropy(F.normalize(torch.randn(2, 512), dim=-1)).min().item() > 3.5


def test_robust_loss_is_zero_without_attackers_moving_the_median():
    clean = torch.randn(4, 7, 16)
    assert robust_loss(clean, clean[:, :0]).item() == 0.0
    attack = 100 * torch.ones(4, 3, 16)
    assert robust_loss(clean, attack).item() > 0


def test_diversity_loss_is_minus_mean_pairwise_squared_distance():
    e = F.normalize(torch.randn(6, 10), dim=-1)
    expected = -sum(((e[i] - e[j]) ** 2).sum() for i in range(6) for j in range(6) if i != j) / 30
    torch.testing.assert_close(diversity_loss(e), expected, rtol=1e-4, atol=1e-5)


def test_thirty_percent_of_ten_nodes_are_three_attackers():
    assert n_attackers(7, 0.3) == 3


def test_code_loss_is_zero_when_the_codes_rank_as_the_floats_and_positive_when_they_swap():
    s = torch.tensor([[0.9, 0.5, 0.1]], requires_grad=True)
    assert code_loss(s, s.detach().clone(), tau=0.05).item() < 1e-7
    swapped = torch.tensor([[0.5, 0.9, 0.1]])  # the codes put the second row first
    loss = code_loss(s, swapped, tau=0.05)
    assert loss.item() > 1.0
    loss.backward()  # straight-through: the float of the true neighbour is pushed up, the impostor's down
    assert s.grad[0, 0] < 0 < s.grad[0, 1]


def test_code_loss_is_the_kl_of_the_float_ranking_to_the_codes_ranking():
    s, s_code, tau = torch.randn(4, 9), torch.randn(4, 9), 0.1
    p, log_q = F.softmax(s / tau, 1), F.log_softmax(s_code / tau, 1)
    expected = (p * (torch.log(p) - log_q)).sum(1).mean()
    torch.testing.assert_close(code_loss(s, s_code, tau), expected, rtol=1e-4, atol=1e-5)
