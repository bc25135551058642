"""``posenc-inspect``: every encoding's checkpoint gives its report, and the numbers in
each JSON file are what the model's attention really adds.

Checkpoints: a tiny model per encoding (the legacy fixtures' flags: 16 wide, 4 heads, 24
positions), its position parameters and its attention's q/k projection biases drawn from
N(0, 1) so that every term is visible, saved in the layout of fairseq's
``Trainer.state_dict`` (``cfg.model`` = the parsed arguments). Each report is made once
(module-scoped cache) and read by several tests. The sentence options, the console script
and checkpoints trained by ``fairseq-train``: ``test_inspect_sentences.py``.

The numeric checks never call the code under test: they run a layer's
``PositionalMultiheadAttention.forward`` (float64, explicit path with ``need_head_weights``)
with its q/k projection weights zeroed (and FoX's gate weights, so that every gate is
``sigmoid(b_h)``, the report's probe), so every token has the same query and key and the
content part of each logit is one constant; the logits are recovered from the returned
probabilities (``log p_ij - log p_i0``, which removes that constant and the softmax's
normaliser). What is left is what the layer's position terms add -- computed by the
attention's own kind dispatch, expansion and masking -- and it must equal the JSON.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from fairseq_posenc.core.context import PositionContext
from fairseq_posenc.core.encodings import get_encoding
from fairseq_posenc.tools.inspection import cli
from tests.support.inspection import layer_values, read_pictures, tiny_checkpoint
from tests.support.model_utils import ALL_ENCODINGS

pytestmark = pytest.mark.slow  # a checkpoint and a rendered report per encoding


#: Report name -> (encoding, extra flags): every encoding, and the variants whose term
#: has another kind (TUPE's reset: a pair bias; Shaw without values: a content bias) or
#: that add the segment term.
CASES: dict[str, tuple[str, list[str]]] = {
    **{name: (name, []) for name in ALL_ENCODINGS},
    "tupe_r_reset": ("tupe_r", ["--tupe-reset-first"]),
    # L = 4 |l| (0.1 to 5 here): rows past it normalised by their own position
    "fire_threshold": ("fire", ["--fire-init-l", "4"]),
    "shaw_keys": ("shaw", ["--shaw-no-value"]),
    "segments": ("sinusoidal", ["--segment-attention", "--segment-separator", "w3"]),
}


def expected_keys(name: str) -> set[str]:
    """The pictures each report must contain, per stack."""
    encoding = CASES[name][0]
    per_stack = {
        "sinusoidal": ["sinusoidal-cosine"], "learned": ["learned-cosine"], "none": [],
        "shape": ["shape-cosine"],
        "t5": ["t5-bias"], "t5_nob": ["t5_nob-bias"], "diet_rel": ["diet_rel-bias"],
        "alibi": ["alibi-bias"], "huang1": ["huang1-factor"], "huang2": ["huang2-factor"],
        "kerple_log": ["kerple_log-bias"], "kerple_power": ["kerple_power-bias"],
        "sandwich": ["sandwich-bias"],
        "at5": ["at5-bias", "at5-soft-bucket"], "at5_nob": ["at5_nob-bias",
                                                         "at5_nob-soft-bucket"],
        "huang3": ["huang3-gate"], "huang4": ["huang4-position-bias"],
        "shaw": ["shaw-position-bias", "shaw-vector-norms"], "xl": ["xl-position-bias"],
        "rope": ["rope-cosine", "rope-pairs"], "xpos": ["xpos-cosine", "xpos-pairs"],
        "diet_abs": ["diet_abs-logits"],
        "diet_abs_lin": ["diet_abs_lin-logits"], "tupe_a": ["tupe_a-logits"],
        "tupe_r": ["tupe_r-logits", "t5-bias"], "fire": ["fire-logits"],
        "cope": ["cope-position-bias", "cope-position-logits"], "fox": ["fox-bias"],
        # PaTH has nothing content-free (a note instead; a sentence's logits:
        # test_inspect_sentences.py)
        "path": [], "stickbreaking": ["stickbreaking-weights"],
    }
    if get_encoding(encoding).causal_only():  # the decoder's; the encoder's sinusoidal
        return ({"encoder-sinusoidal-cosine"}
                | {f"decoder-{what}" for what in per_stack[encoding]})
    per_stack = per_stack[encoding]
    keys = {f"{stack}-{what}" for stack in ("encoder", "decoder") for what in per_stack}
    if encoding == "diet_abs_lin":  # a causal decoder cannot project: it is diet_abs
        keys = {k.replace("decoder-diet_abs_lin", "decoder-diet_abs") for k in keys}
    if name == "tupe_r_reset":  # one pair table: absolute, relative and reset together
        keys -= {"encoder-t5-bias", "decoder-t5-bias"}
    if name == "segments":
        keys.add("encoder-segments-logits")
    return keys


@dataclass
class Inspected:
    model: torch.nn.Module
    out: Path
    pictures: dict[str, dict]


@pytest.fixture(scope="module")
def inspected(tmp_path_factory):
    made: dict[str, Inspected] = {}

    def get(name: str) -> Inspected:
        if name not in made:
            root = tmp_path_factory.mktemp(name)
            encoding, extra = CASES[name]
            model = tiny_checkpoint(encoding, extra, root / "checkpoint_best.pt")
            assert cli.main([str(root / "checkpoint_best.pt"), "--out", str(root / "out")]) == 0
            made[name] = Inspected(model, root / "out", read_pictures(root / "out"))
        return made[name]

    return get


@pytest.mark.parametrize("name", list(CASES))
def test_every_encoding_writes_its_report(inspected, name):
    """PNGs with a JSON each, all shown by index.html; the expected pictures are there."""
    report = inspected(name)
    pngs = sorted(p.name for p in report.out.glob("*.png"))
    assert {Path(p).stem for p in pngs} == set(report.pictures) == expected_keys(name)
    html = (report.out / "index.html").read_text()
    for png in pngs:
        assert (report.out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"src='{png}'" in html
    if name == "none":
        assert "no position term" in html and not pngs


def split_key(key: str) -> tuple[str, str, str]:
    stack, term, what = key.split("-", 2)
    return stack, term, what


def as_matrix(picture: dict, layer: int, n: int) -> torch.Tensor:
    """``(H, n, n)`` logits: a distance curve read at ``j - i``, or the heatmap itself."""
    values = layer_values(picture, layer)
    if picture["kind"] == "heatmaps":
        return values
    r = torch.arange(n)[None, :] - torch.arange(n)[:, None]
    # a causal stack's curve stops at j - i = 0; the keys after the query are masked
    return values[:, (r - picture["x"][0]).clamp(max=values.size(-1) - 1)]


def attention_logits(model, stack: str, layer: int, n: int, q_bias=None, k_bias=None,
                     keep_biases: bool = False, segment_ids=None,
                     weights_only: bool = False) -> torch.Tensor:
    """``(H, n, k)``: the logits of the layer's own self-attention, from its probabilities,
    minus those of key 0, with q/k projection weights zeroed (see the module docstring).
    Biases: the given ones, the layer's own (``keep_biases``) or zero. ``weights_only``:
    the attention weights themselves (stick-breaking's are no softmax of logits)."""
    model = copy.deepcopy(model).double()
    module = getattr(model, stack)
    attn = module.layers[layer].self_attn
    with torch.no_grad():
        for proj, bias in ((attn.q_proj, q_bias), (attn.k_proj, k_bias)):
            proj.weight.zero_()
            if not keep_biases:
                proj.bias.copy_(torch.zeros_like(proj.bias) if bias is None else bias)
        gate = getattr(attn.encoding, "gate", None)  # fox's gates read the input too:
        if gate is not None:  # zeroed, every gate is sigmoid(b_h), as the report's probe
            gate.weight.zero_()
    x = torch.randn(n, 1, attn.embed_dim, dtype=torch.float64)
    mask = (torch.full((n, n), float("-inf"), dtype=torch.float64).triu(1)
            if stack == "decoder" else None)
    with torch.no_grad(), module.pos_scope.open(PositionContext(segment_ids=segment_ids)):
        _, weights = attn(x, x, x, need_weights=True, need_head_weights=True, attn_mask=mask)
    if weights_only:
        return weights[:, 0]
    logp = weights[:, 0].log()
    return logp - logp[..., :1]


def assert_logits(actual: torch.Tensor, expected: torch.Tensor, causal: bool) -> None:
    expected = expected - expected[..., :1]
    if causal:  # keys after the query are masked: compare j <= i
        keep = torch.ones(actual.shape[-2:], dtype=torch.bool).tril()
        actual, expected = actual[..., keep], expected.expand_as(actual)[..., keep]
    # float32 JSON against a float64 forward: TUPE's logits reach ~100
    torch.testing.assert_close(actual, expected.expand_as(actual), rtol=2e-6, atol=2e-5)


ADDITIVE = {"bias", "logits", "position-bias"}


#: The segment term needs segment ids: test_segment_term_equals_what_the_attention_adds;
#: PaTH has no picture without a sentence: test_inspect_sentences.py.
ATTENTION_CASES = [name for name, (enc, _) in CASES.items()
                   if enc not in ("sinusoidal", "learned", "none", "shape", "path")]


@pytest.mark.parametrize("name", ATTENTION_CASES)
def test_json_equals_what_the_attention_adds(inspected, name):
    """For every layer of both stacks, the JSON's position terms (summed where a layer has
    several, as TUPE-R) equal the logits the layer's forward adds; multiplicative terms
    are checked with a constant q.k (Huang 1-2: q.k = 1, so the logit is the factor) or
    all-ones q, k (Huang 3: d_h x mean gate; RoPE: d_h x mean cosine)."""
    report = inspected(name)
    head_dim = 4  # 16 wide, 4 heads
    ones = torch.ones(16, dtype=torch.float64)
    unscaled = ones * math.sqrt(head_dim)  # the attention scales q by 1/sqrt(d_h)
    checked = 0
    for stack in ("encoder", "decoder"):
        for layer in range(2):
            pics = {key: p for key, p in report.pictures.items() if key.startswith(stack)
                    and any(layer in panel["layers"] for panel in p["panels"])}
            by_what = {split_key(key)[2]: p for key, p in pics.items()}
            additive = [p for key, p in pics.items() if split_key(key)[2] in ADDITIVE]
            if additive:
                n = 24
                keep = any(p["term"] in ("shaw", "huang4", "cope") for p in additive)
                actual = attention_logits(report.model, stack, layer, n, keep_biases=keep)
                if "diet_abs_lin" in {p["term"] for p in additive}:
                    n = actual.size(-1)  # projected keys: (H, 24, k)
                expected = sum(as_matrix(p, layer, 24)[..., :n] for p in additive)
                assert_logits(actual, expected, stack == "decoder")
                checked += 1
            if "factor" in by_what:
                q = ones / math.sqrt(head_dim)  # scaled q = ones / d_h: q.k = 1
                actual = attention_logits(report.model, stack, layer, 24, q, ones)
                assert_logits(actual, as_matrix(by_what["factor"], layer, 24),
                              stack == "decoder")
                checked += 1
            if "weights" in by_what:  # stick-breaking: the probe's row of the layer's own
                picture = by_what["weights"]  # weights, query at D over keys 0..D
                actual = attention_logits(report.model, stack, layer, len(picture["x"]),
                                          keep_biases=True, weights_only=True)
                torch.testing.assert_close(layer_values(picture, layer), actual[:, -1],
                                           rtol=0, atol=1e-6)
                checked += 1
            for what in ("gate", "cosine"):  # Huang 3, RoPE, xPos
                if what in by_what and by_what[what]["term"] in ("huang3", "rope", "xpos"):
                    actual = attention_logits(report.model, stack, layer, 24, unscaled, ones)
                    assert_logits(actual, head_dim * as_matrix(by_what[what], layer, 24),
                                  stack == "decoder")
                    checked += 1
    assert checked >= 2


def test_segment_term_equals_what_the_attention_adds(inspected):
    """S[l,h][seg(i), seg(j)] from the JSON's K x K tables against the layer's forward on
    a source with two segments."""
    report = inspected("segments")
    ids = torch.tensor([[0, 0, 0, 1, 1]])
    for layer in range(2):
        table = layer_values(report.pictures["encoder-segments-logits"], layer)  # H, K, K
        expected = table[:, ids[0][:, None], ids[0][None, :]]
        actual = attention_logits(report.model, "encoder", layer, 5, segment_ids=ids)
        assert_logits(actual, expected, causal=False)


@pytest.mark.parametrize("name", ["sinusoidal", "learned", "shape"])
def test_input_embeddings_cosine(inspected, name):
    """The encoder's own forward_embedding minus its token part is the position embedding
    it adds; its cosine similarities are the JSON's."""
    report = inspected(name)
    encoder = report.model.encoder
    tokens = torch.full((1, 24), 5)
    with torch.no_grad():
        x, token_part = encoder.forward_embedding(tokens)
    positions = (x - token_part)[0].double()
    unit = positions / positions.norm(dim=-1, keepdim=True)
    panel, = report.pictures[f"encoder-{name}-cosine"]["panels"]  # the input: no layer
    torch.testing.assert_close(torch.tensor(panel["values"], dtype=torch.float64),
                               unit @ unit.t(), rtol=0, atol=1e-5)


def test_shaw_vector_norms_and_rope_pairs(inspected):
    """Shaw's norms are those of the parameters at clip(j - i); RoPE's per-pair table is
    cos((j - i) theta_p) with theta_p = 10000^(-2p/d_h), the paper's formula."""
    shaw = inspected("shaw")
    picture = shaw.pictures["encoder-shaw-vector-norms"]
    r = torch.tensor(picture["x"]).clamp(-16, 16) + 16
    for layer in range(2):
        term = shaw.model.encoder.layers[layer].self_attn.encoding
        expected = torch.stack([term.rel_key.norm(dim=-1)[r], term.rel_value.norm(dim=-1)[r]])
        torch.testing.assert_close(layer_values(picture, layer), expected.double(),
                                   rtol=0, atol=1e-6)
    pairs = inspected("rope").pictures["encoder-rope-pairs"]
    distance = torch.tensor([int(c) for c in pairs["col_labels"]], dtype=torch.float64)
    theta = 10000.0 ** (-torch.arange(0, 4, 2, dtype=torch.float64) / 4)
    torch.testing.assert_close(layer_values(pairs, 0)[0],
                               torch.cos(theta[:, None] * distance), rtol=0, atol=1e-6)


def test_xpos_pairs(inspected):
    """xPos's per-pair table is cos((j - i) theta_p) zeta_p^((i - j)/512), zeta_p =
    (2p/d_h + 0.4)/1.4 (Sun et al. 2023), in both stacks."""
    for stack in ("encoder", "decoder"):
        pairs = inspected("xpos").pictures[f"{stack}-xpos-pairs"]
        distance = torch.tensor([int(c) for c in pairs["col_labels"]], dtype=torch.float64)
        exponent = torch.arange(0, 4, 2, dtype=torch.float64)[:, None] / 4
        theta, zeta = 10000.0 ** -exponent, (exponent + 0.4) / 1.4
        expected = torch.cos(theta * distance) * zeta ** (-distance / 512)
        got = layer_values(pairs, 0)[0]
        if stack == "decoder":  # keys after the query do not exist
            got, expected = got[:, distance <= 0], expected[:, distance <= 0]
        torch.testing.assert_close(got, expected, rtol=0, atol=1e-6)


def test_at5_soft_buckets(inspected):
    """f = 1 - exp(-relu(slope) |r| / L) from the parameters (eqs. 17, 19)."""
    report = inspected("at5")
    picture = report.pictures["encoder-at5-soft-bucket"]
    term = report.model.encoder.layers[0].self_attn.encoding
    r = torch.tensor(picture["x"], dtype=torch.float64)
    slope = torch.where(r > 0, torch.relu(term.alpha.double())[:, None],
                        torch.relu(term.beta.double())[:, None]) / term.max_len
    torch.testing.assert_close(layer_values(picture, 0), 1 - torch.exp(-slope * r.abs()),
                               rtol=0, atol=1e-6)


def test_cope_position_logits(inspected):
    """z[p] = q.e[p] / sqrt(d_h) for the query of an all-zero input (the projection bias
    b_Q) and each integer position p, from the parameters."""
    report = inspected("cope")
    for stack in ("encoder", "decoder"):
        picture = report.pictures[f"{stack}-cope-position-logits"]
        for layer in range(2):
            attn = getattr(report.model, stack).layers[layer].self_attn
            table, first = attn.encoding.pos_emb.double(), attn.encoding.p_lo
            q = attn.q_proj.bias.double().view(4, 4) / 2  # 4 heads of d_h = 4, / sqrt(d_h)
            expected = q @ table[:, [p - first for p in picture["x"]]]
            torch.testing.assert_close(layer_values(picture, layer), expected,
                                       rtol=0, atol=1e-5)
