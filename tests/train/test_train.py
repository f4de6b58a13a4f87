"""homespec.train: data generation (resumable), draft vocabulary, training-time test, export."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
import torch

from homespec.errors import HomespecError
from homespec.nets.eagle3 import Eagle3Config, Eagle3Head, load_head
from homespec.promptsets import load_prompts
from homespec.train.config import TrainConfig
from homespec.train.progress import Progress
from homespec.train.vocab import build_vocab

pytest.importorskip("llama_cpp")

N_LAYER = 6
LAYERS = (2, N_LAYER // 2, N_LAYER - 3)
DATA_KW = dict(tokens=10_000, max_new_tokens=16, seed=0, feature_layers=LAYERS, parallel=4, shard_prompts=4, n_threads=1)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    from tiny_models import make_tiny_gguf

    return make_tiny_gguf(tmp_path_factory.mktemp("train") / "tiny.gguf", n_layer=N_LAYER)


@pytest.fixture(scope="module")
def prompts():
    return load_prompts("train")[:12]


@pytest.fixture(scope="module")
def data_dir(tiny, prompts, tmp_path_factory) -> Path:
    from homespec.train.data import generate_data

    out = tmp_path_factory.mktemp("data") / "full"
    generate_data(tiny, out, prompts, **DATA_KW)
    return out


@pytest.fixture(scope="module")
def setup(tiny, data_dir):
    """Head, frozen target tables, shards and batches for the tiny target."""
    from homespec.train.api import head_config, read_target_config, target_tables
    from homespec.train.batches import epoch_plan, sequence_refs
    from homespec.train.shards import load_shards
    from homespec.train.ttt import Frozen, init_lm_head
    from homespec.train.vocab import count_tokens

    cfg = read_target_config(str(tiny))
    _, shards = load_shards(data_dir)
    vocab = build_vocab(count_tokens(shards, cfg.n_vocab), 256)
    torch.manual_seed(0)
    head = Eagle3Head(head_config(cfg, vocab.size, eagle3=False))
    head.d2t.copy_(torch.from_numpy(vocab.d2t))
    head.t2d.copy_(torch.from_numpy(vocab.t2d))
    embed, output = target_tables(str(tiny))
    frozen = Frozen(embed, output, torch.from_numpy(vocab.ids))
    init_lm_head(head, frozen)
    refs = sequence_refs(shards, max_len=256)
    return head, frozen, shards, refs, epoch_plan(refs, 0, 0, 1024)


def _shard_bytes(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.glob("shard-*/*.npy"))}


# --- draft vocabulary -----------------------------------------------------------------------


def test_draft_vocab_maps_are_consistent():
    rng = np.random.default_rng(0)
    counts = rng.poisson(3.0, size=1000) * (rng.random(1000) < 0.3)
    v = build_vocab(counts, 100)
    d = np.arange(v.size)
    assert v.t2d[d + v.d2t].all()  # every draft id maps to a target id the mask holds
    assert v.t2d.sum() == v.size == 100
    assert (np.diff(v.d2t) >= 0).all()  # ascending target ids: non-decreasing offsets
    assert counts[v.ids].min() >= np.sort(counts)[::-1][99]  # the most frequent ids were kept
    assert 0 < v.coverage <= 1


# --- data generation ------------------------------------------------------------------------


def test_data_records_every_position(data_dir, prompts):
    from homespec.train.shards import load_shards

    manifest, shards = load_shards(data_dir)
    assert len(shards) == 3 and sum(s.n_seq for s in shards) == len(prompts)
    sh = shards[0]
    n = sh.offsets[-1]
    assert sh.features.shape == (n, 3 * 64) and sh.features.dtype == np.float16
    assert sh.hidden.shape == (n, 64) and sh.generated.shape == (n,)
    assert sh.generated.any() and not sh.generated[: sh.offsets[1]][:5].any()  # replies, after the prompt
    assert manifest["shards"][0]["generated"] == int(sh.generated.sum())


def test_hidden_reproduces_the_targets_greedy_tokens(tiny, data_dir):
    """hidden @ output^T recomputes the target's logits: its argmax is the next reply token."""
    from homespec.train.api import target_tables
    from homespec.train.shards import load_shards

    _, shards = load_shards(data_dir)
    _, output = target_tables(str(tiny))
    sh = shards[0]
    gen = np.asarray(sh.generated)
    idx = np.nonzero(gen[1:])[0]  # positions whose next token was generated
    logits = torch.from_numpy(np.asarray(sh.hidden[idx], dtype=np.float32)) @ output.T
    agree = (logits.argmax(-1).numpy() == np.asarray(sh.tokens)[idx + 1]).mean()
    assert agree > 0.97  # fp16 storage may flip a near tie


def test_data_generation_resumes_to_identical_shards(tiny, prompts, data_dir, tmp_path):
    from homespec.train.data import generate_data

    class Killed(Exception):
        pass

    seen = []

    def kill_in_second_shard(ev: Progress) -> None:
        seen.append(ev.info["shard"])
        if ev.info["shard"] == 1 and seen.count(1) == 3:
            raise Killed

    out = tmp_path / "resumed"
    with pytest.raises(Killed):
        generate_data(tiny, out, prompts, **DATA_KW, progress=kill_in_second_shard)
    assert len(list(out.glob("shard-*"))) == 1  # the shard being written was lost, nothing else
    summary = generate_data(tiny, out, prompts, **DATA_KW)
    assert summary.shards == 3
    assert _shard_bytes(out) == _shard_bytes(data_dir)
    again = generate_data(tiny, out, prompts, **DATA_KW)  # all done: nothing regenerated
    assert again.generated_now == 0


def test_data_skip_shards_starts_at_a_later_shard(tiny, prompts, data_dir, tmp_path):
    """--skip-shards: the same shards as a full run from that one on (fresh prompts for a warm start)."""
    from homespec.errors import UsageError
    from homespec.train.data import generate_data
    from homespec.train.shards import read_manifest

    out = tmp_path / "later"
    summary = generate_data(tiny, out, prompts, **DATA_KW, skip_shards=1)
    full = _shard_bytes(data_dir)
    assert summary.shards == 2 and summary.generated > 0
    assert _shard_bytes(out) == {k: v for k, v in full.items() if not k.startswith("shard-00000")}
    assert [s["prompts"] for s in read_manifest(out)["shards"]] == [[4, 8], [8, 12]]
    with pytest.raises(HomespecError, match="skip_shards"):  # resuming needs the same skip
        generate_data(tiny, out, prompts, **DATA_KW)
    with pytest.raises(HomespecError, match="skip_shards"):
        generate_data(tiny, data_dir, prompts, **DATA_KW, skip_shards=2)
    with pytest.raises(UsageError, match="leaves no prompts"):  # 12 prompts make 3 shards
        generate_data(tiny, tmp_path / "none", prompts, **DATA_KW, skip_shards=3)


def test_torch_data_batches_sequences_and_matches_one_sequence_prefill(tiny, prompts, tmp_path):
    """backend torch: sequences decoded together (one-row steps batched, prompts and user turns
    on their own) give each position the features, final hidden state and greedy next token of a
    plain one-sequence prefill of the same tokens; multi-turn items exercise the rollback."""
    from homespec.backends.torch.backend import TorchBackend
    from homespec.nets.llama import rms_norm
    from homespec.train.data import generate_data
    from homespec.train.shards import load_shards, read_manifest

    turns = [p for p in load_prompts("train") if len(p.turns) > 1][:3]
    assert turns
    items = turns + list(prompts[:5])
    out = tmp_path / "torch"
    summary = generate_data(tiny, out, items, **{**DATA_KW, "max_new_tokens": 24, "shard_prompts": 8}, backend="torch")
    assert summary.shards == 1 and read_manifest(out)["parallel"] == 4  # (not forced to one sequence)
    _, shards = load_shards(out)
    sh = shards[0]
    ref = TorchBackend.load(str(tiny), max_context=1024)
    ref.set_feature_layers(LAYERS + (N_LAYER,))
    model, k = ref.model, len(LAYERS) * 64
    checked = 0
    for s in range(sh.n_seq):
        a, b = int(sh.offsets[s]), int(sh.offsets[s + 1])
        toks = np.asarray(sh.tokens[a:b]).tolist()
        ref.reset()
        fwd = model.forward(torch.as_tensor(toks), capture=ref.feature_layers)
        feats = fwd.features
        hidden = rms_norm(feats[:, k:], model.norm, model.cfg.rms_eps)
        np.testing.assert_allclose(np.asarray(sh.features[a:b], np.float32), feats[:, :k].numpy(), rtol=2e-3, atol=2e-3)
        np.testing.assert_allclose(np.asarray(sh.hidden[a:b], np.float32), hidden.numpy(), rtol=2e-3, atol=2e-3)
        gen = np.asarray(sh.generated[a:b])
        top2 = fwd.logits.topk(2, dim=-1)
        for j in np.nonzero(gen[1:])[0]:  # every generated token is the reference's argmax there
            if float(top2.values[j, 0] - top2.values[j, 1]) > 1e-4:
                assert toks[j + 1] == int(top2.indices[j, 0])
                checked += 1
    assert checked > 50


def test_data_refuses_other_settings(tiny, prompts, data_dir):
    from homespec.train.data import generate_data

    with pytest.raises(HomespecError, match="other settings"):
        generate_data(tiny, data_dir, prompts, **{**DATA_KW, "max_new_tokens": 17})


def test_trainer_refuses_unreadable_target(tmp_path):
    from homespec.train import train_head

    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF" + b"\x00" * 7)
    with pytest.raises(HomespecError):
        train_head(TrainConfig(target=bad, out=tmp_path / "out"))
    with pytest.raises(HomespecError):
        train_head(TrainConfig(target=tmp_path / "missing.gguf", out=tmp_path / "out"))


# --- training-time test ---------------------------------------------------------------------


def test_ttt_matches_the_drafters_inference():
    """Unroll step k at entry j computes what the drafter computes at tree depth k."""
    from homespec.train.ttt import Batch, Frozen, ttt_loss

    torch.manual_seed(0)
    c = Eagle3Config(hidden_size=32, num_attention_heads=4, num_key_value_heads=2, head_dim=8, intermediate_size=64,
                     vocab_size=100, draft_vocab_size=50, target_hidden_size=32, fc_norm=True, norm_output=True)
    head = Eagle3Head(c).eval()
    for p in head.parameters():
        torch.nn.init.normal_(p, std=0.3)
    E, W = torch.randn(100, 32), torch.randn(100, 32)
    frozen = Frozen(E, W, torch.arange(0, 100, 2))
    T, j = 10, 5
    # every token in the draft vocabulary and a reply token, so at step k the read-out rows are
    # entries 0..T-3-k in order and entry j is row j
    tok, feats = 2 * torch.randint(0, 50, (1, T)), torch.randn(1, T, 96)
    batch = Batch(tok, feats, torch.randn(1, T, 32), torch.ones(1, T, dtype=torch.bool), torch.tensor([T]))
    seen = []
    log_probs = head.log_probs
    head.log_probs = lambda n: seen.append(log_probs(n)) or seen[-1]
    ttt_loss(head, frozen, batch, 3)
    del head.log_probs
    # inference: committed entries 0..j from target features, then a chain of draft steps
    cache = head.new_cache(64)
    slot = torch.arange(j + 1)
    out, normed = head(E[tok[0, 1 : j + 2]], head.project(feats[0, : j + 1]), slot, cache, slot[None, :] <= slot[:, None])
    torch.testing.assert_close(head.log_probs(normed)[j], seen[0][j], atol=1e-5, rtol=0)
    hidden = head.next_hidden(out, normed)[j : j + 1]
    for k in (1, 2):
        attend = torch.zeros(1, cache.length + 1, dtype=torch.bool)
        attend[0, : j + 1] = True
        attend[0, j + 1 :] = True
        out, normed = head(E[tok[0, j + 1 + k : j + 2 + k]], hidden, torch.tensor([j + k]), cache, attend)
        torch.testing.assert_close(head.log_probs(normed)[0], seen[k][j], atol=1e-5, rtol=0)
        hidden = head.next_hidden(out, normed)


def _train_steps(head, frozen, shards, refs, plan, steps: int, lr: float = 3e-3):
    from homespec.train.batches import collate
    from homespec.train.ttt import ttt_loss

    opt = torch.optim.AdamW(head.parameters(), lr=lr)
    for s in range(steps):
        out = ttt_loss(head, frozen, collate(shards, refs, plan[s % len(plan)]), 3)
        opt.zero_grad()
        out.loss.backward()
        opt.step()
    return head


@pytest.mark.slow
def test_a_few_steps_lower_the_loss(setup):
    from homespec.train.batches import collate
    from homespec.train.ttt import ttt_loss

    head, frozen, shards, refs, plan = setup
    head = copy.deepcopy(head)
    batch = collate(shards, refs, plan[0])
    with torch.no_grad():
        before = ttt_loss(head, frozen, batch, 3)
    _train_steps(head, frozen, shards, refs, plan, 6)
    with torch.no_grad():
        after = ttt_loss(head, frozen, batch, 3)
    assert float(after.loss) < 0.8 * float(before.loss)
    assert after.step_acc[0] > before.step_acc[0]


@pytest.mark.slow
def test_training_raises_held_out_acceptance(tiny, setup):
    from homespec.train.evaluate import AcceptanceMeter

    head, frozen, shards, refs, plan = setup
    meter = AcceptanceMeter(str(tiny), load_prompts("dev")[:2], max_new_tokens=24, depth=4, topk=4, total=16)
    try:
        untrained = meter.measure(head)
        trained = meter.measure(_train_steps(copy.deepcopy(head), frozen, shards, refs, plan, 30))
    finally:
        meter.close()
    assert trained.tau > untrained.tau + 0.15, (untrained, trained)


def test_checkpoint_resume_continues_the_same_run(setup, tmp_path):
    from homespec.train.config import TrainConfig
    from homespec.train.loop import train

    head, frozen, shards, refs, _ = setup
    cfg = TrainConfig(epochs=2, ttt_steps=2, batch_tokens=400, checkpoint_every=2, eval_every=0, log_every=1)
    straight = train(copy.deepcopy(head), frozen, shards, refs, cfg, checkpoint=tmp_path / "a.pt", meta={"x": 1})

    class Killed(Exception):
        pass

    def kill(ev: Progress) -> None:
        if ev.done == 3:
            raise Killed

    with pytest.raises(Killed):
        train(copy.deepcopy(head), frozen, shards, refs, cfg, checkpoint=tmp_path / "b.pt", meta={"x": 1}, progress=kill)
    resumed_head = copy.deepcopy(head)
    resumed = train(resumed_head, frozen, shards, refs, cfg, checkpoint=tmp_path / "b.pt", meta={"x": 1})
    assert resumed.step == straight.step > 3
    assert [r["loss"] for r in resumed.history] == [r["loss"] for r in straight.history]
    with pytest.raises(HomespecError, match="other settings"):
        train(copy.deepcopy(head), frozen, shards, refs, cfg, checkpoint=tmp_path / "b.pt", meta={"x": 2})


# --- export ---------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_export_round_trips_bit_exactly(setup, tmp_path, dtype):
    from homespec.train.export import export_head

    head = setup[0]
    export_head(head, tmp_path, dtype=dtype)
    c = head.config
    loaded = load_head(tmp_path, N_LAYER, c.target_hidden_size, c.vocab_size, dtype=dtype)
    assert loaded.config == c
    ref = {k: v.to(dtype) if v.is_floating_point() else v for k, v in head.state_dict().items()}
    got = loaded.state_dict()
    assert ref.keys() == got.keys()
    for k in ref:
        assert got[k].dtype == ref[k].dtype and torch.equal(got[k], ref[k]), k
    assert (tmp_path / "config.json").is_file() and (tmp_path / "model.safetensors").is_file()


def test_frozen_read_out_and_hidden_regression(setup, tmp_path):
    """--freeze-lm-head keeps the draft read-out at the target's own rows while the rest trains and
    the loss falls; the hidden-state regression adds a non-negative term that vanishes when the
    head's normed output equals the target's hidden state."""
    from homespec.train.batches import collate
    from homespec.train.config import TrainConfig
    from homespec.train.loop import train
    from homespec.train.ttt import ttt_loss

    head, frozen, shards, refs, plan = setup
    batch = collate(shards, refs, plan[0])
    with torch.no_grad():
        plain = ttt_loss(head, frozen, batch, 2)
        both = ttt_loss(head, frozen, batch, 2, hidden_weight=1.0)
    assert float(both.loss) > float(plain.loss)  # an untrained head is far from the target's states
    h = copy.deepcopy(head)
    read_out, fc = h.lm_head.weight.detach().clone(), h.fc.weight.detach().clone()
    cfg = TrainConfig(epochs=1, ttt_steps=2, batch_tokens=1024, eval_every=0, freeze_lm_head=True, hidden_weight=1.0, lr=1e-3,
                      log_every=1)
    state = train(h, frozen, shards, refs, cfg, checkpoint=tmp_path / "f.pt", meta={})
    assert torch.equal(h.lm_head.weight, read_out) and not torch.equal(h.fc.weight, fc)
    losses = [r["loss"] for r in state.history if "loss" in r]
    assert losses[-1] < losses[0]


def test_acceptance_record_is_consistent_and_read_back(tiny, setup, tmp_path):
    """The record the trainer writes beside the head: per shape, tau = 1 + sum(at_least), the
    shares fall with depth, and the guard's reader returns the matching shape's row."""
    from homespec.formats.acceptance import read_prior
    from homespec.train.evaluate import AcceptanceMeter

    head, frozen, shards, refs, plan = setup
    trained = _train_steps(copy.deepcopy(head), frozen, shards, refs, plan, 10)
    meter = AcceptanceMeter(str(tiny), load_prompts("dev")[:1], max_new_tokens=16)
    try:
        rows = meter.record(trained, tmp_path, [(3, 4, 10), (2, 1, 3)], split="dev")
    finally:
        meter.close()
    for r in rows:
        assert r["steps"] > 0 and len(r["at_least"]) == r["depth"]
        assert r["tau"] == pytest.approx(1 + sum(r["at_least"]), abs=1e-3)
        assert all(a >= b for a, b in zip(r["at_least"], r["at_least"][1:]))
    assert read_prior(tmp_path, 2, 1, 3) == tuple(rows[1]["at_least"])
    assert read_prior(tmp_path, 3, 4, 10) == tuple(rows[0]["at_least"])


def test_train_head_end_to_end_records_its_training_length(tiny, tmp_path):
    """The whole `homespec draft train` path on the tiny target: data, vocabulary, training, export.
    The head records its longest training sequence, and a session drafts with that window by
    default (--window 0: full attention; a negative window is a usage error)."""
    import json

    from homespec.errors import UsageError
    from homespec.session import RunOptions, Session
    from homespec.train.api import read_target_config, train_head

    out = tmp_path / "head"
    result = train_head(TrainConfig(target=tiny, out=out, tokens=200, epochs=1, draft_vocab=256, max_new_tokens=16,
                                    parallel=4, n_threads=1, batch_tokens=96, eval_prompts=0, shard_prompts=8, seed=0))
    assert result.steps > 0 and result.head_bytes > 0
    # the checkpoint records the settings it always has (an earlier run resumes): no more, no fewer
    meta = torch.load(out / "train" / "checkpoint.pt", map_location="cpu", weights_only=False)["meta"]
    assert meta == {"epochs": 1, "ttt_steps": 5, "lr": 5e-4, "batch_tokens": 96, "seed": 0, "eagle3": False,
                    "draft_vocab": result.draft_vocab, "vocab_sum": meta["vocab_sum"], "sequences": meta["sequences"]}
    window = json.loads((out / "config.json").read_text())["draft_window"]
    assert 3 <= window <= 64  # sequences are cut to max(64, batch_tokens // 2) positions
    cfg = read_target_config(str(tiny))
    assert load_head(out, cfg.n_layer, cfg.n_embd, cfg.n_vocab).config.draft_window == window

    def drafter_window(w):
        s = Session.open(RunOptions(model=str(tiny), draft=str(out), method="eagle3", backend="torch", ctx=256,
                                    draft_depth=2, draft_topk=2, draft_tokens=5, window=w), with_plan=False)
        try:
            return s.drafter.window
        finally:
            s.close()

    assert drafter_window(None) == window
    assert drafter_window(0) is None
    assert drafter_window(7) == 7
    with pytest.raises(UsageError):
        drafter_window(-1)


def test_warm_start_carries_the_head_over(tiny, setup, tmp_path):
    """--init: every weight is copied, each read-out row follows its token into the new draft
    vocabulary (a token new to it starts from the target's output row), and a head of the other
    EAGLE kind or of another shape is refused."""
    from dataclasses import replace

    from homespec.errors import UsageError
    from homespec.nets.eagle3 import save_head
    from homespec.train.api import head_config, read_target_config, target_tables
    from homespec.train.ttt import Frozen, init_lm_head
    from homespec.train.vocab import count_tokens
    from homespec.train.warm import read_source, warm_start, weights_digest

    head, _, shards, _, _ = setup
    cfg = read_target_config(str(tiny))
    old = copy.deepcopy(head)
    torch.manual_seed(1)
    with torch.no_grad():
        for p in old.parameters():
            p.add_(0.05 * torch.randn_like(p))
    save_head(old, tmp_path / "old")

    vocab = build_vocab(count_tokens(shards, cfg.n_vocab), 320)
    new = Eagle3Head(head_config(cfg, vocab.size, eagle3=False))
    new.d2t.copy_(torch.from_numpy(vocab.d2t))
    new.t2d.copy_(torch.from_numpy(vocab.t2d))
    embed, output = target_tables(str(tiny))
    init_lm_head(new, Frozen(embed, output, torch.from_numpy(vocab.ids)))
    fresh_rows = new.lm_head.weight.detach().clone()
    w = warm_start(new, read_source(tmp_path / "old", cfg, new.config), cfg, vocab.ids)

    assert w.digest == weights_digest(tmp_path / "old") and len(w.digest) == 64
    assert w.rows_kept > 0 and w.rows_new > 0 and w.rows_kept + w.rows_new == 320
    mine, theirs = new.state_dict(), old.state_dict()
    for key in mine:
        if key not in ("lm_head.weight", "d2t", "t2d", "embed_tokens.weight"):
            assert torch.equal(mine[key], theirs[key]), key
    old_tokens = old.draft_to_target.tolist()
    row_of = {t: i for i, t in enumerate(old_tokens)}
    kept = 0
    for i, t in enumerate(vocab.ids.tolist()):
        if t in row_of:
            kept += 1
            assert torch.equal(new.lm_head.weight[i], old.lm_head.weight[row_of[t]])
        else:
            assert torch.equal(new.lm_head.weight[i], fresh_rows[i])
    assert kept == w.rows_kept

    with pytest.raises(UsageError, match="not plain EAGLE-3") as e:
        read_source(tmp_path / "old", cfg, head_config(cfg, vocab.size, eagle3=True))
    assert e.value.hint == "drop --eagle3"
    with pytest.raises(UsageError, match="needs"):
        read_source(tmp_path / "old", cfg, replace(new.config, intermediate_size=cfg.n_ff * 2))
    with pytest.raises(HomespecError, match="config.json"):
        read_source(tmp_path / "missing", cfg, new.config)


def test_train_head_warm_starts_and_resumes_only_from_the_same_head(tiny, tmp_path):
    """TrainConfig(init=...): the run starts from the given head (on the same first batch, its loss
    is the trained head's, far below a fresh head's), records the head's digest, and a rerun with
    another head refuses the checkpoint instead of mixing two runs."""
    import json

    from homespec.train.api import train_head

    kw = dict(target=tiny, tokens=200, epochs=1, draft_vocab=256, max_new_tokens=16, parallel=4, n_threads=1,
              batch_tokens=96, eval_prompts=0, shard_prompts=8, seed=0, lr=1e-3)
    a, b = tmp_path / "a", tmp_path / "b"
    train_head(TrainConfig(out=a, **{**kw, "epochs": 8}))
    b.mkdir()
    (b / "data").symlink_to(a / "data")
    warm = train_head(TrainConfig(out=b, init=a, **kw))
    assert warm.steps > 0
    # the same data, so the same draft vocabulary: every read-out row carried over
    assert (warm.warm.source, warm.warm.rows_kept, warm.warm.rows_new) == (a, 256, 0)

    def first_loss(d):  # the same seed and data: both runs start on the same batch
        return next(r["loss"] for r in json.loads((d / "train" / "history.json").read_text()) if "loss" in r)

    assert first_loss(b) < 0.5 * first_loss(a)
    other = tmp_path / "other"  # b's exported head: other weights than a's
    other.mkdir()
    for name in ("config.json", "model.safetensors"):
        (other / name).write_bytes((b / name).read_bytes())
    with pytest.raises(HomespecError, match=r"other settings \(init\)"):
        train_head(TrainConfig(out=b, init=other, **kw))


def test_keep_vocab_keeps_the_init_heads_draft_vocabulary(tiny, tmp_path):
    """--keep-vocab: a warm start on other prompts keeps the source head's draft vocabulary (every
    read-out row carried over), where a recount on the new data alone drops some of its tokens;
    without --init it is a one-line usage error."""
    from homespec.errors import UsageError
    from homespec.train.api import read_target_config, train_head

    cfg = read_target_config(str(tiny))
    kw = dict(target=tiny, tokens=150, epochs=1, draft_vocab=128, max_new_tokens=16, parallel=4, n_threads=1,
              batch_tokens=96, eval_prompts=0, shard_prompts=8, seed=0, lr=1e-3)
    a = tmp_path / "a"
    train_head(TrainConfig(out=a, **kw))
    src = load_head(a, N_LAYER, 64, cfg.n_vocab).draft_to_target.numpy()
    recount = train_head(TrainConfig(out=tmp_path / "recount", init=a, skip_shards=1, **kw))
    kept = train_head(TrainConfig(out=tmp_path / "kept", init=a, skip_shards=1, keep_vocab=True, **kw))
    assert recount.warm.rows_new > 0  # the other prompts' most frequent tokens differ
    assert (kept.warm.rows_kept, kept.warm.rows_new) == (128, 0)
    assert np.array_equal(load_head(tmp_path / "kept", N_LAYER, 64, cfg.n_vocab).draft_to_target.numpy(), src)
    assert 0 < kept.vocab_coverage < 1
    with pytest.raises(UsageError, match="--keep-vocab"):
        train_head(TrainConfig(out=tmp_path / "none", keep_vocab=True, **kw))


def test_data_from_pools_another_runs_data(tiny, tmp_path):
    """--data-from: training reads the other run's shards too (more steps over the same epochs,
    a vocabulary counted on both); the same data twice, or another target's data, is refused."""
    from homespec.errors import UsageError
    from homespec.train.api import train_head
    from tiny_models import make_tiny_gguf

    kw = dict(target=tiny, tokens=150, epochs=1, draft_vocab=128, max_new_tokens=16, parallel=4, n_threads=1,
              batch_tokens=96, eval_prompts=0, shard_prompts=8, seed=0, lr=1e-3)
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    alone_a = train_head(TrainConfig(out=a, **kw))
    alone_b = train_head(TrainConfig(out=b, skip_shards=1, **kw))
    pooled = train_head(TrainConfig(out=c, skip_shards=1, data_from=[a / "data"], **kw))
    assert pooled.data.generated == alone_b.data.generated  # its own data: only the new shard
    assert pooled.steps >= alone_a.steps + alone_b.steps - 1  # one epoch over both
    with pytest.raises(UsageError, match="already part of this run"):
        train_head(TrainConfig(out=b, skip_shards=1, data_from=[b / "data"], **kw))
    other = make_tiny_gguf(tmp_path / "other.gguf", n_layer=N_LAYER + 2)
    with pytest.raises(UsageError, match="another target"):
        train_head(TrainConfig(out=tmp_path / "d", data_from=[a / "data"], **{**kw, "target": other}))


# --- the configuration ----------------------------------------------------------------------


def test_draft_train_options_default_to_the_train_config():
    """Every `draft train` option defaults to its TrainConfig field: the command and the library
    run the same training (the library's epochs once defaulted to 4 where the command's said 2)."""
    import typer

    from homespec.cli import app

    command = typer.main.get_command(app).commands["draft"].commands["train"]
    defaults = TrainConfig()
    options = {p.name: p.default for p in command.params}
    assert len(options) == 18 and defaults.epochs == 2
    for name, default in options.items():
        # a repeatable option's "not given" is None on the command line, () in the config
        assert (tuple(default or ()) if name == "data_from" else default) == getattr(defaults, name), name


@pytest.mark.parametrize("kw, message", [
    ({"epochs": 0}, "--epochs 0: 0 is outside [1, 1000]"),
    ({"tokens": 0}, "--tokens 0: 0 is outside [1, 10000000000]"),
    ({"draft_vocab": 1}, "--draft-vocab 1: 1 is outside [2, 1048576]"),
    ({"ttt_steps": 1_000_000}, "--ttt-steps 1000000: 1000000 is outside [1, 32]"),
    ({"hidden_weight": -1.0}, "--hidden-weight -1.0: -1 is outside [0, 1000]"),
    ({"hidden_weight": float("nan")}, "--hidden-weight nan: nan is not a finite number"),
    ({"lr": float("nan")}, "lr nan is not a finite number"),
    ({"skip_shards": -1}, "--skip-shards -1: -1 is outside [0, 1048576]"),
    ({"batch_tokens": 0}, "batch_tokens must be at least 1"),
    ({"lr": 0.0}, "lr must be positive"),
    ({"backend": "exl2"}, "--backend exl2 cannot generate training data"),
    ({"keep_vocab": True}, "--keep-vocab keeps the draft vocabulary of the --init head"),
    ({"init": "runs/head"}, "is the output directory"),
], ids=lambda v: v if isinstance(v, str) and v.startswith("-") else None)
def test_train_config_refuses_settings_no_run_can_start_with(kw, message):
    """TrainConfig checks its settings when made (a copy with other settings too), each refusal a
    UsageError naming the flag with a hint."""
    import dataclasses
    import re

    from homespec.errors import UsageError

    with pytest.raises(UsageError, match=re.escape(message)) as e:
        TrainConfig(**kw)
    assert e.value.hint
    with pytest.raises(UsageError, match=re.escape(message)):
        dataclasses.replace(TrainConfig(), **kw)


def test_train_config_compares_paths_by_value(tmp_path):
    """Paths are kept as strings and --data-from as a tuple: equal settings make equal configs."""
    a = TrainConfig(target=tmp_path / "t.gguf", out=tmp_path, data_from=[tmp_path / "d"])
    b = TrainConfig(target=str(tmp_path / "t.gguf"), out=str(tmp_path), data_from=(str(tmp_path / "d"),))
    assert a == b and hash(a) == hash(b) and a.data_from == (str(tmp_path / "d"),)


def test_checkpoint_meta_keeps_the_keys_runs_have_always_written():
    """What a resumed run must match: the same keys and values as before the settings became one
    object, so every earlier checkpoint resumes; data, evaluation and path settings are not in it."""
    from types import SimpleNamespace

    from homespec.train.api import checkpoint_meta

    vocab = SimpleNamespace(size=128, ids=np.arange(128))
    base = {"epochs": 2, "ttt_steps": 5, "lr": 5e-4, "batch_tokens": 4096, "seed": 0, "eagle3": False,
            "draft_vocab": 128, "vocab_sum": 8128, "sequences": 7}
    assert checkpoint_meta(TrainConfig(), vocab, 7) == base
    other = TrainConfig(out="elsewhere", tokens=9, parallel=2, eval_prompts=0, eval_every=3, checkpoint_every=5)
    assert checkpoint_meta(other, vocab, 7) == base
    assert checkpoint_meta(TrainConfig(hidden_weight=1.0), vocab, 7) == {
        **base, "freeze_lm_head": False, "hidden_weight": 1.0, "weight_decay": 0.0}
    assert checkpoint_meta(TrainConfig(), vocab, 7, SimpleNamespace(digest="ab12")) == {**base, "init": "ab12"}


def test_draft_train_refuses_bad_settings_before_reading_anything(capsys, tmp_path):
    """A setting no run can start with is a two-line usage error from the config's own check,
    before the target (here missing) or --out is looked at."""
    from homespec.cli import main

    code = main(["draft", "train", "--target", str(tmp_path / "missing.gguf"), "--out", str(tmp_path / "run"),
                 "--epochs", "0"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and lines == ["error: --epochs 0 is outside [1, 1000]", "hint: use --epochs 2"]
    assert not (tmp_path / "run").exists()


# --- the output directory -------------------------------------------------------------------


def _tree(d: Path) -> dict[str, bytes | None]:
    """Every path under d with a file's bytes: what a refusal must leave alone."""
    return {str(p.relative_to(d)): p.read_bytes() if p.is_file() else None for p in sorted(d.rglob("*"))}


def _user_dir(tmp: Path) -> Path:
    d = tmp / "unrelated"
    d.mkdir()
    (d / "notes.txt").write_text("mine\n")
    return d


def _file(tmp: Path) -> Path:
    (tmp / "notes.txt").write_text("mine\n")
    return tmp / "notes.txt"


def _data_file_in_user_dir(tmp: Path) -> Path:
    d = tmp / "mixed"
    d.mkdir()
    (d / "data").write_text("a file of the user's called data\n")
    return d


def _data_file_in_run(tmp: Path) -> Path:
    from homespec.train.rundir import claim_out

    d = tmp / "run"
    claim_out(d)
    (d / "data").write_text("a file of the user's called data\n")
    return d


def _under_a_file(tmp: Path) -> Path:
    return _file(tmp) / "run"


@pytest.mark.parametrize("make, message", [
    (_user_dir, "holds other files and is not a homespec training run"),
    (_file, "is a file, not a directory"),
    (_data_file_in_user_dir, "not a homespec training run"),
    (_data_file_in_run, "data is a file, where the run writes its data"),
    (_under_a_file, "notes.txt is a file, not a directory"),
], ids=["unrelated-dir", "file", "data-file-in-dir", "data-file-in-run", "under-a-file"])
def test_draft_train_refuses_an_out_that_is_not_a_run(capsys, tmp_path, make, message):
    """--out must be new, empty or a training run; anything else is a two-line usage error that
    leaves the user's files as they were. The target here cannot even be read: the refusal about
    --out comes first, so it comes before any data is generated or any model loaded."""
    from homespec.cli import main

    target = tmp_path / "unreadable.gguf"
    target.write_bytes(b"GGUF" + b"\x00" * 7)
    out = make(tmp_path)
    before = _tree(tmp_path)
    code = main(["draft", "train", "--target", str(target), "--out", str(out), "--tokens", "100"])
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 2 and lines[0].startswith("error: --out") and message in lines[0], err
    assert lines[1].startswith("hint: ") and ("choose a new or empty directory" in lines[1]), err
    assert _tree(tmp_path) == before


def test_draft_train_refuses_bad_init_and_data_from_paths(capsys, tmp_path, tiny):
    """--init naming a file, and --data-from naming a run's directory rather than its data/, are
    one-line usage errors (the file was an internal error before), with nothing written to --out."""
    from homespec.cli import main
    from homespec.train.rundir import claim_out

    out = tmp_path / "new"
    code = main(["draft", "train", "--target", str(tiny), "--out", str(out), "--init", str(_file(tmp_path))])
    err = capsys.readouterr().err
    assert code == 2 and "a file, not a head directory" in err and "hint: " in err, err
    run = tmp_path / "earlier"
    claim_out(run)
    (run / "data").mkdir()
    (run / "data" / "manifest.json").write_text('{"shards": []}\n')
    code = main(["draft", "train", "--target", str(tiny), "--out", str(out), "--data-from", str(run)])
    err = capsys.readouterr().err
    assert code == 2 and f"--data-from {run / 'data'}" in err, err
    assert not out.exists()


def test_train_head_accepts_an_empty_dir_and_resumes_a_run(tiny, tmp_path):
    """An empty --out (a hidden file aside) is accepted and marked as a run first; rerunning resumes
    it (no data generated again, training already done); a run holding homespec's data but no
    marker (made before it, or seeded with another run's data/) resumes too, and gets the marker."""
    from homespec.train.api import train_head
    from homespec.train.rundir import MARKER

    kw = dict(target=tiny, tokens=150, epochs=1, draft_vocab=128, max_new_tokens=16, parallel=4, n_threads=1,
              batch_tokens=96, eval_prompts=0, shard_prompts=8, seed=0, lr=1e-3)
    out = tmp_path / "empty"
    out.mkdir()
    (out / ".DS_Store").write_bytes(b"\x00")
    first = train_head(TrainConfig(out=out, **kw))
    assert first.data.generated_now > 0 and first.steps > 0 and (out / MARKER).is_file()
    again = train_head(TrainConfig(out=out, **kw))
    assert again.data.generated_now == 0 and again.steps == first.steps
    (out / MARKER).unlink()
    (out / "log.txt").write_text("a log of the run\n")  # what scripts/train_default_head.sh keeps there
    older = train_head(TrainConfig(out=out, **kw))
    assert older.data.generated_now == 0 and older.steps == first.steps and (out / MARKER).is_file()
    assert (out / "log.txt").read_text() == "a log of the run\n"
