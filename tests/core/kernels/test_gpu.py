"""On a CUDA GPU: every encoding decodes exactly, trains in fp16 and bf16, runs its GPU
kernels exactly (through the plugin and through ``fairseq_posenc.nn``), and goes through
``fairseq-train --fp16`` / ``fairseq-generate --fp16``.

Skipped where CUDA is absent (CI has no GPU). Run on a GPU machine with
``python -m pytest tests/core/kernels/test_gpu.py -v``; a session with a GPU quotes its output in its
note. The references are the same as on CPU: the full-sequence forward for incremental
decoding, and the bias path (itself checked against the papers' formulas on CPU) for the
concatenated low-rank kernel.
"""

from __future__ import annotations

import math

import pytest
import torch

import tests.support.cli_utils as cu
from tests.support.batches import random_source
from tests.support.layers import layer_run
from tests.support.low_rank import CASES, set_kernel
from tests.support.model_utils import (ALL_ENCODINGS, ATTENTION_ENCODINGS, VOCAB, build_attention,
                                 build_model)

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
CUDA = torch.device("cuda")


@pytest.fixture(autouse=True)
def _exact_float32():
    """float32 comparisons in float32 (TF32 matmuls round to 10 bits)."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


@pytest.mark.parametrize("encoding", ALL_ENCODINGS)
def test_incremental_equals_full_forward_on_gpu(encoding):
    model, d = build_model(encoding)
    model.to(CUDA)
    bsz, beam, steps = 2, 3, 9
    src, lengths = random_source(d, bsz)
    src, lengths = src.repeat_interleave(beam, 0).to(CUDA), lengths.repeat_interleave(beam, 0)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        enc_out = model.encoder(src, lengths.to(CUDA))
        prefix = torch.full((bsz * beam, 1), d.eos(), device=CUDA)
        state: dict = {}
        for t in range(steps):
            step = model.decoder(prefix, enc_out, incremental_state=state)[0][:, -1]
            full = model.decoder(prefix, enc_out)[0][:, -1]
            assert (step - full).abs().max() <= 1e-4, f"step {t}"
            new_order = torch.cat([s * beam + torch.randint(0, beam, (beam,), generator=g)
                                   for s in range(bsz)]).to(CUDA)
            model.decoder.reorder_incremental_state_scripting(state, new_order)
            nxt = torch.randint(d.nspecial, VOCAB, (bsz * beam, 1), generator=g).to(CUDA)
            prefix = torch.cat([prefix[new_order], nxt], 1)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("encoding", ALL_ENCODINGS)
def test_half_precision_training_step_is_finite(encoding, dtype):
    model, d = build_model(encoding)
    model.to(CUDA, dtype).train()
    src, lengths = random_source(d)
    prev = torch.randint(d.nspecial, VOCAB, (3, 8))
    prev[:, 0] = d.eos()
    prev[0, -2:] = d.pad()
    logits = model(src.to(CUDA), lengths.to(CUDA), prev.to(CUDA))[0]
    loss = torch.nn.functional.cross_entropy(logits.float().view(-1, logits.size(-1)),
                                             prev.to(CUDA).view(-1), ignore_index=d.pad())
    loss.backward()
    assert math.isfinite(float(loss))
    for name, p in model.named_parameters():
        assert p.grad is None or torch.isfinite(p.grad).all(), name


@pytest.mark.parametrize("encoding", ["learned", "t5", "alibi", "huang2", "shaw", "xl",
                                      "rope", "diet_abs", "tupe_r"])
def test_random_positions_training_on_gpu_equals_cpu(encoding):
    """--random-positions in a training forward: on CUDA (the float mask or the explicit
    path, never a kernel that assumes consecutive positions) the same numbers as on CPU at
    the same drawn positions, and a finite fp16 training step."""
    from fairseq_posenc.core.random_positions import draw_positions

    model, d = build_model(encoding, ["--random-positions", "64"])
    src, lengths = random_source(d)
    prev = torch.randint(d.nspecial, VOCAB, (3, 8))
    prev[:, 0] = d.eos()
    prev[0, -2:] = d.pad()
    g = torch.Generator().manual_seed(3)
    for stack, tokens in ((model.encoder, src), (model.decoder, prev)):
        drawn = draw_positions(tokens.eq(d.pad()), 64, g)
        stack.pos_draw = lambda padding, p=drawn: p.to(padding.device)
    model.train()  # dropout is 0
    cpu = model(src, lengths, prev)[0].detach()
    model.to(CUDA)
    inputs = src.to(CUDA), lengths.to(CUDA), prev.to(CUDA)
    gpu = model(*inputs)[0]
    assert (gpu.detach().cpu() - cpu).abs().max() < 1e-4
    model.half()
    logits = model(*inputs)[0]
    logits.float().sum().backward()
    assert torch.isfinite(logits).all()
    for name, p in model.named_parameters():
        assert p.grad is None or torch.isfinite(p.grad).all(), name


@pytest.mark.parametrize("encoding,flags,causal", CASES)
def test_concatenated_low_rank_kernel_on_gpu(encoding, flags, causal):
    """The fused kernel with ``[q, P_Q] . [k, P_K]`` against the bias path, on the GPU,
    float32, outputs and gradients."""
    attn = build_attention(encoding, causal=causal, max_positions=12, **flags)
    attn.float().to(CUDA).train()
    T, B = 9, 3
    x = torch.randn(T, B, attn.embed_dim, device=CUDA)
    padding = torch.zeros(B, T, dtype=torch.bool, device=CUDA)
    if causal:
        padding[0, -3:] = True
    else:
        padding[0, :3] = True
    runs = {}
    for kernel in ("bias", "concat"):
        attn.low_rank_kernel = kernel
        runs[kernel] = layer_run(attn, x, causal, padding)
    assert (runs["bias"][0] - runs["concat"][0]).abs().max() < 1e-4
    for g_b, g_c in zip(runs["bias"][1], runs["concat"][1]):
        if g_b is not None:
            assert (g_b - g_c).abs().max() < 1e-3 * max(1.0, float(g_b.abs().max()))


@pytest.mark.parametrize("encoding", ["diet_abs", "tupe_a", "tupe_r", "alibi"])
def test_auto_kernel_on_gpu_is_the_concatenated_one(encoding):
    model, d = build_model(encoding)
    model.to(CUDA)
    src, lengths = random_source(d)
    prev = torch.randint(d.nspecial, VOCAB, (3, 6), device=CUDA)
    with torch.no_grad():
        outs = {}
        for kernel in ("bias", "auto"):
            set_kernel(model, kernel)
            enc_out = model.encoder(src.to(CUDA), lengths.to(CUDA))
            outs[kernel] = model.decoder(prev, enc_out)[0]
    assert (outs["bias"] - outs["auto"]).abs().max() < 1e-4


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("gpu_data")
    raw, bin_ = root / "raw", root / "bin"
    sizes = cu.create_parallel_corpus(raw, num_test=13)
    cu.preprocess_translation_data(raw, bin_)
    return raw, bin_, sizes


@pytest.mark.parametrize("encoding", ["sinusoidal", *ATTENTION_ENCODINGS])
def test_fp16_train_and_generate_every_sentence(encoding, data, tmp_path):
    raw, bin_, sizes = data
    # The recipes' attention dropout (examples/wmt): the fused kernels' own, in training.
    cu.train_translation_model(bin_, tmp_path, f"transformer_tiny_{encoding}", max_update=8,
                               extra_flags=["--fp16", "--attention-dropout", "0.1"])
    out = cu.generate_main(bin_, tmp_path / "checkpoint_last.pt", extra_flags=["--fp16"])
    hyps = cu.hypotheses(out, "H")
    assert sorted(hyps) == list(range(sizes["test"])), out[-2000:]


@pytest.mark.parametrize("dropout_p", [0.0, 0.1])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("causal", [False, True])
def test_fused_distance_kernel_at_a_training_shape(dtype, causal, dropout_p):
    """The compiled distance-bias kernel (8 sentences, 8 heads, 300 tokens, d_h = 64:
    partial last tiles) against the naive softmax in float64 on the same rounded inputs;
    the errors are those of rounding probabilities to ``dtype`` for the matrix products.
    With attention dropout the reference drops where the kernel's mask does."""
    from tests.support.distance_kernel import run_both
    config = (8, 8, 300, 300, 64, 64, 0, causal, 8, True, False)
    (out, grads), (ref_out, ref_grads) = run_both(config, dtype, dropout_p=dropout_p)
    tol = 1e-2 if dtype == torch.bfloat16 else 2e-3
    assert (out.cpu() - ref_out).abs().max() < tol * ref_out.abs().max()
    for got, ref in zip(grads, ref_grads):
        assert (got.cpu() - ref).abs().max() < tol * ref.abs().max()


def test_fused_table_gradient_is_reproducible():
    """Each distance's sum is stored once per query block and summed in torch, no atomic
    adds: two runs give the same bits (64 sentences x 8 heads x 300 tokens, bf16)."""
    from tests.support.distance_kernel import kernels
    g = torch.Generator(device=CUDA).manual_seed(0)
    q, k, v = (torch.randn(64, 8, 300, 64, device=CUDA, generator=g, dtype=torch.bfloat16)
               for _ in range(3))
    table = torch.randn(8, 599, device=CUDA, generator=g, dtype=torch.bfloat16)
    padding = torch.arange(300, device=CUDA)[None] < torch.arange(64, device=CUDA)[:, None]
    grads = []
    for _ in range(2):
        t = table.clone().requires_grad_()
        kernels.distance_attention(q, k, v, t, -299, 0, padding).float().sum().backward()
        grads.append(t.grad)
    assert torch.equal(grads[0], grads[1])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("encoding", ["t5", "diet_rel", "at5", "tupe_r", "alibi", "huang1",
                                      "huang2", "shaw", "xl", "huang4", "kerple_log",
                                      "kerple_power", "sandwich"])
def test_auto_fuses_distance_terms_in_half_precision(encoding, dtype):
    """``distance_kernel="auto"`` runs the fused kernel in every layer with a learned
    distance bias or factor, Shaw's, Transformer-XL's or Huang 4's terms (tables with no
    gradient at these lengths take SDPA's float mask: ``FIXED_TABLE_SDPA_MAX_LEN``), and a
    model's outputs match the bias (or explicit) path's to half precision."""
    from tests.support.distance_kernel import counting_calls, set_kernels
    model, d = build_model(encoding)
    model.to(CUDA, dtype)
    src, lengths = random_source(d)
    prev = torch.randint(d.nspecial, VOCAB, (3, 6), device=CUDA)
    outs, counts = {}, {}
    with torch.no_grad():
        for kernel in ("bias", "auto"):
            set_kernels(model, kernel, "auto")
            with counting_calls() as calls:
                enc_out = model.encoder(src.to(CUDA), lengths.to(CUDA))
                outs[kernel] = model.decoder(prev, enc_out)[0].float()
            counts[kernel] = len(calls)
    # 2 layers each side; AT5 is in first layers only; tables with no gradient this short
    # take SDPA's float mask (the decoder's ALiBi: concatenated dimensions)
    fused = 0 if encoding in ("alibi", "sandwich") else 2 if encoding == "at5" else 4
    assert counts == {"bias": 0, "auto": fused}
    assert (outs["bias"] - outs["auto"]).abs().max() < 3e-2 * outs["bias"].abs().max()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("encoding", ["t5", "shaw", "xl", "huang1", "alibi", "sandwich"])
def test_auto_fuses_with_attention_dropout_in_training(encoding, dtype):
    """With the recipes' ``--attention-dropout 0.1``, in training, ``"auto"`` keeps the
    fused kernel (its dropout variant, self-checked on this GPU) in every layer, and the
    training step's loss and gradients are finite. Fixed tables this short take SDPA's
    float mask instead (``FIXED_TABLE_SDPA_MAX_LEN``); the decoder's causal ALiBi takes the
    kernel with dropout (``CAUSAL_CONCAT_MAX_LEN``)."""
    from tests.support.distance_kernel import counting_calls
    model, d = build_model(encoding, ["--attention-dropout", "0.1"])
    model.to(CUDA, dtype).train()
    src, lengths = random_source(d)
    prev = torch.randint(d.nspecial, VOCAB, (3, 8), device=CUDA)
    prev[:, 0] = d.eos()
    with counting_calls() as calls:
        logits = model(src.to(CUDA), lengths.to(CUDA), prev)[0]
    assert len(calls) == {"alibi": 2, "sandwich": 0}.get(encoding, 4)  # 2 layers a side
    loss = torch.nn.functional.cross_entropy(logits.float().view(-1, logits.size(-1)),
                                             prev.view(-1), ignore_index=d.pad())
    loss.backward()
    assert math.isfinite(float(loss))
    for name, p in model.named_parameters():
        assert p.grad is None or torch.isfinite(p.grad).all(), name


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_fused_rotation_on_gpu(dtype):
    """The compiled rotation against the complex64 path at a training shape (64 x 8 heads
    x 512 positions, d_h = 64): outputs and gradients within one unit in the last place,
    and ``"auto"`` uses it for a RoPE model in half precision."""
    from fairseq_posenc.core.encodings.rope import rotate_pairs
    from fairseq_posenc.core.kernels.rotary import rotate
    from tests.support.rotary import rotations, set_rope_kernel
    g = torch.Generator().manual_seed(0)
    x = torch.randn(512, 64, 8, 64, generator=g).to(CUDA, dtype).permute(1, 2, 0, 3)
    d_out = torch.randn(64, 8, 512, 64, generator=g).to(CUDA, dtype)
    rot = rotations(512, 64).to(CUDA)
    results = []
    for fn in (rotate, rotate_pairs):
        xg = x.detach().requires_grad_()
        out = fn(xg, rot)
        out.backward(d_out)
        results.append((out.float(), xg.grad.float()))
    eps = torch.finfo(dtype).eps
    for fused, reference in zip(*results):
        assert ((fused - reference).abs() <= eps * reference.abs().clamp(min=1e-3)).all()
    model, d = build_model("rope")
    model.to(CUDA, dtype)
    src, lengths = random_source(d)
    calls = []
    import fairseq_posenc.core.kernels.rotary as rotary
    original = rotary.rotate
    rotary.rotate = lambda *a: calls.append(1) or original(*a)
    try:
        set_rope_kernel(model, "auto")
        with torch.no_grad():
            model.encoder(src.to(CUDA), lengths.to(CUDA))
    finally:
        rotary.rotate = original
    assert len(calls) == 4  # q and k in 2 encoder layers


@pytest.mark.parametrize("dropout_p", [0.0, 0.1])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("causal", [False, True])
def test_fused_shaw_at_a_training_shape(dtype, causal, dropout_p):
    """The compiled kernel with Shaw's terms by clipped distance (8 x 8 heads x 300 tokens,
    d_h = 64, k = 16) against eqs. (3)-(5) written out in float64 on the same inputs."""
    from tests.support.distance_kernel import run_shaw
    got, ref = run_shaw((8, 8, 300, 300, 0, 16, causal), dtype, d=64, dropout_p=dropout_p)
    tol = 1e-2 if dtype == torch.bfloat16 else 2e-3
    for a, b in zip(got, ref):
        assert (a - b).abs().max() < tol * b.abs().max()


@pytest.mark.parametrize("dropout_p", [0.0, 0.1])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("causal", [False, True])
def test_fused_rows_at_a_training_shape(dtype, causal, dropout_p):
    """The compiled kernel with content terms by distance, query and key rows (Huang 4;
    8 x 8 heads x 300 tokens, d_h = 64) against the sum written out in float64."""
    from tests.support.distance_kernel import run_rows
    got, ref = run_rows((8, 8, 300, 300, 0, causal, True, 0), dtype, d=64,
                        dropout_p=dropout_p)
    tol = 1e-2 if dtype == torch.bfloat16 else 2e-3
    for n, (a, b) in enumerate(zip(got, ref)):
        assert (a - b).abs().max() < tol * b.abs().max(), n


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("encoding", ["t5", "shaw", "xl", "huang1"])
def test_the_torch_api_runs_the_fused_kernels(encoding, dtype):
    """``fairseq_posenc.nn``'s layers in half precision take the fused kernel in every
    layer, as the plugin's do, and give the numbers of the same layers in float32 (torch's
    paths) to half precision; decoding step by step through a ``DecodingCache`` gives the
    full forward's."""
    import fairseq_posenc.nn as posenc
    from tests.support.distance_kernel import counting_calls

    torch.manual_seed(0)
    stack = posenc.PositionStack(encoding, num_layers=2, embed_dim=64, num_heads=4,
                                 causal=True)
    layers = torch.nn.ModuleList(posenc.PositionalSelfAttention(64, 4, stack, layer=i,
                                                                causal=True)
                                 for i in range(2)).to(CUDA)

    def run(x, cache=None):
        for attn in layers:
            x = x + attn(x, cache=cache)
        return x

    x = torch.randn(3, 40, 64, device=CUDA)
    with torch.no_grad():
        want = run(x)
        layers.to(dtype)
        with counting_calls() as calls:
            got = run(x.to(dtype)).float()
        cache = posenc.DecodingCache()
        steps = torch.cat([run(x[:, t:t + 1].to(dtype), cache) for t in range(8)], 1)
    assert len(calls) == 2
    scale = want.abs().max()
    assert (got - want).abs().max() < 3e-2 * scale
    assert (steps.float() - got[:, :8]).abs().max() < 3e-2 * scale


@pytest.fixture
def users_distance_bias():
    """A distance bias written as a user would, registered for one test."""
    from tests.support.user_encodings import registered

    with registered() as name:
        yield name


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_a_users_distance_bias_runs_the_fused_kernel(users_distance_bias, dtype):
    """The planner reads the kind: a user's ``DistanceBias`` takes the fused distance kernel
    in half precision, in every layer, with its gradient, and gives float32's numbers to half
    precision."""
    import fairseq_posenc.nn as posenc
    from tests.support.distance_kernel import counting_calls

    torch.manual_seed(0)
    layers = torch.nn.ModuleList(posenc.PositionalSelfAttention(
        64, 4, users_distance_bias, causal=False) for _ in range(2)).to(CUDA)
    x = torch.randn(3, 40, 64, device=CUDA)

    def run(x):
        for attn in layers:
            x = x + attn(x)
        return x

    want = run(x)
    layers.to(dtype)
    with counting_calls() as calls:
        got = run(x.to(dtype))
    got.float().sum().backward()
    assert len(calls) == 2
    assert (got.float() - want.detach()).abs().max() < 3e-2 * want.abs().max()
    assert all(attn.position_encoding.scale.grad is not None for attn in layers)


def _close(got, want, rel):
    """``got`` within ``rel`` of ``want``'s largest magnitude."""
    return (got.double() - want.double()).abs().max() <= rel * want.double().abs().max()


@pytest.mark.parametrize("causal", [False, True], ids=["encoder", "decoder"])
def test_fire_below_its_threshold_runs_the_fused_kernel(causal):
    """FIRE in fp16 with ``"auto"``: every position below L (100 tokens, L = 512) takes the
    fused distance kernel with FIRE's table by distance; beyond L (L = 50) the pair path.
    Against the float64 pair path: the outputs to half precision, and the gradients of the
    MLP, c and L within 5% of their largest value or no farther than twice fp16's pair path
    (``distance_kernel="bias"``; a scalar's gradient sums many terms of both signs)."""
    from tests.support.distance_kernel import counting_calls, set_kernels

    T, B = 100, 4
    attn = build_attention("fire", causal=causal, embed_dim=64, num_heads=4,
                           max_positions=128).to(CUDA)
    x = torch.randn(T, B, 64, dtype=torch.float64, device=CUDA)
    padding = torch.zeros(B, T, dtype=torch.bool, device=CUDA)
    if causal:
        padding[1, -7:] = True  # targets padded on the right, sources on the left
    else:
        padding[1, :7] = True
    for threshold, fused in ((512.0, 1), (50.0, 0)):
        enc = attn.encoding
        with torch.no_grad():
            enc.l_multiplier.fill_(threshold / enc.init_l)
            enc.c.fill_(0.1)
        attn.double()
        set_kernels(attn, "bias", "auto")
        want_out, want_grads = layer_run(attn, x, causal, padding)
        attn.half()
        pair_out, pair_grads = layer_run(attn, x.half(), causal, padding)
        set_kernels(attn, "auto", "auto")
        with counting_calls() as calls:
            got_out, got_grads = layer_run(attn, x.half(), causal, padding)
        assert len(calls) == fused, threshold
        assert _close(got_out, want_out, 2e-2)
        for got, pair, want in zip(got_grads[-6:], pair_grads[-6:], want_grads[-6:]):
            scale = want.double().abs().max()  # the last six: the MLP's, c, l
            pair_error = (pair.double() - want.double()).abs().max()
            error = (got.double() - want.double()).abs().max()
            assert error <= max(5e-2 * scale, 2 * pair_error), threshold


def test_cope_in_blocks_of_queries_on_gpu(monkeypatch):
    """CoPE past BLOCK_PAIRS in float32 (TF32 off): the same logits and gradients as one
    piece, and a forward + backward of the logits peaks at less than half one piece's
    memory (8 blocks of 64 queries of 512)."""
    import fairseq_posenc.core.encodings.cope as cope
    from fairseq_posenc.core.context import PositionContext

    enc = build_attention("cope", causal=True, embed_dim=64, num_heads=4,
                          max_positions=512).encoding.to(CUDA, torch.float32)
    q = torch.randn(4, 4, 512, 16, device=CUDA) / 4
    k = torch.randn(4, 4, 512, 16, device=CUDA)
    weights = torch.randn(4, 4, 512, 512, device=CUDA)

    def run():
        qg, kg = q.clone().requires_grad_(True), k.clone().requires_grad_(True)
        enc.pos_emb.grad = None
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        out = enc.content_logits(qg, kg, 0, PositionContext())
        (out * weights).sum().backward()
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - before
        return out.detach(), (qg.grad, kg.grad, enc.pos_emb.grad.clone()), peak

    whole = run()
    monkeypatch.setattr(cope, "BLOCK_PAIRS", 4 * 4 * 512 * 64)
    blocks = run()
    assert _close(blocks[0], whole[0], 1e-6)  # cuBLAS may pick another algorithm per block
    for got, want in zip(blocks[1], whole[1]):
        assert _close(got, want, 1e-5)
    assert blocks[2] < 0.5 * whole[2], (blocks[2], whole[2])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_fox_decoder_route_on_gpu(dtype):
    """``fox``'s decoder in half precision takes the extra dimensions (its sums split in
    two), and gives the float64 bias path's numbers on CPU (the reference, itself checked
    against the paper's loop) as closely as the half-precision bias does, at 512 tokens
    where ``|c|`` reaches thousands; its gradients are finite."""
    import copy

    from fairseq_posenc.core.attention_plan import Call, plan_attention

    def run(layer, x, padding):
        mask = torch.triu(torch.full((T, T), float("-inf"), dtype=x.dtype,
                                     device=x.device), 1)
        with layer.scope.open():
            return layer(x, x, x, key_padding_mask=padding, attn_mask=mask,
                         need_weights=False)[0]

    attn = build_attention("fox", causal=True, embed_dim=64, num_heads=4)  # float64, CPU
    T, B = 512, 2
    x = torch.randn(T, B, 64, dtype=torch.float64)
    padding = torch.zeros(B, T, dtype=torch.bool)
    padding[1, -40:] = True
    with torch.no_grad():
        want = run(attn, x, padding)
        sums = attn.encoding.log_gates(x).cumsum(-1)
    assert sums.abs().max() > 500
    gpu = copy.deepcopy(attn).to(CUDA, dtype)
    plan = plan_attention(gpu._positions, Call(CUDA, dtype, T, T, causal=True, padding=True,
                                               grad=True))
    assert plan.concatenated == (gpu.encoding,)
    real = ~padding.t()
    scale = float(want[real].abs().max())
    errors = {}
    for kernel in ("auto", "bias"):
        gpu.low_rank_kernel = kernel
        xg = x.to(CUDA, dtype)
        got = run(gpu, xg, padding.to(CUDA))
        errors[kernel] = float((got.detach().double().cpu()[real] - want[real]).abs().max())
        gpu.zero_grad()
        got[real.to(CUDA)].float().pow(2).sum().backward()
        assert torch.isfinite(gpu.encoding.gate.weight.grad).all(), kernel
    assert errors["auto"] <= 2 * errors["bias"] + 1e-3 * scale, errors
