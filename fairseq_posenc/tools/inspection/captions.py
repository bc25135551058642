"""Titles and captions of the pictures: what exactly is plotted, from which paper and
equation, and how to read it. Kept apart from the computation (``term_pictures.py``) so the
text can be read and reviewed in one place; ``docs/inspect.md`` says the same at more length.

Keys are ``(term name, what)``, as :mod:`.term_pictures` names its pictures; a missing key
falls back to a generic sentence rather than failing, so a new encoding still gets a report.
"""

from __future__ import annotations

from ...core.encodings.kinds import PositionKind

NO_POSITION_TERM = ("This stack has no position term: no input position embedding and no "
                    "position term in self-attention (--pos-encoding none, the AT5 paper's "
                    "Non-PE baseline). Only the decoder's causal mask orders anything.")

#: Kinds with nothing content-free to picture: the note a report gives instead.
ONLY_WITH_TOKENS = {
    PositionKind.PATH: ("PaTH (path) reads its transforms from the tokens, and an all-zero "
                        "input transforms nothing: there is no content-free picture. "
                        "posenc-inspect --sentence '...' pictures the decoder's effective "
                        "q_i^T H_i ... H_(j+1) k_j / sqrt(d_h) on that sentence, read as the "
                        "decoder's input, beside plain q_i.k_j / sqrt(d_h)."),
}

_DISTANCE = ("One query at position D and keys 0..2D, through the term's own expanded(): "
             "exactly the row the attention adds for distances j - i = -D..D. ")

TEXT: dict[tuple[str, str], tuple[str, str]] = {
    ("t5", "bias"): ("T5 relative bias b_h[bucket(j - i)]",
                     "Raffel et al. 2020, sec. 2.1 (also TUPE-R's relative term, Ke et al. "
                     "2020 eq. 11): one learned scalar per head and logarithmic bucket, added "
                     "to the scaled logits. " + _DISTANCE + "Flat steps are shared buckets."),
    ("t5_nob", "bias"): ("T5-NoB relative bias b_h[clip(j - i)]",
                         "Wu et al. 2021 (AT5), T5-NoB: one scalar per head and distance, "
                         "no buckets, clipped to the table. " + _DISTANCE),
    ("diet_rel", "bias"): ("DIET-REL bias R[l,h][j - i]",
                           "Chen et al. 2021b eq. 3 (= REL-SCALAR of Chen et al. 2021a): one "
                           "scalar per head, layer and distance, added to the logits. "
                           + _DISTANCE),
    ("at5", "bias"): ("AT5 bias g_h,sign(f_h(j - i))",
                      "Wu et al. 2021 eqs. 17-20: the per-head MLP g applied to the soft "
                      "bucket f. " + _DISTANCE),
    ("at5", "soft-bucket"): ("AT5 soft buckets f_h(j - i) = 1 - exp(-slope |j - i|)",
                             "Wu et al. 2021 eqs. 17, 19: the learned soft bucket in [0, 1) "
                             "per head (beta for j <= i, alpha for j > i), from the term's "
                             "soft_bucket(); g maps it to the bias."),
    ("at5_nob", "bias"): ("AT5-NoB bias g_h,sign(sigmoid(E_h[j - i]))",
                          "Wu et al. 2021, AT5-NoB: AT5's MLPs on a learned per-distance "
                          "table instead of the exponential bucket. " + _DISTANCE),
    ("at5_nob", "soft-bucket"): ("AT5-NoB soft buckets sigmoid(E_h[j - i])",
                                 "Wu et al. 2021, AT5-NoB: the learned bucket value per head "
                                 "and distance, from the term's soft_bucket()."),
    ("alibi", "bias"): ("ALiBi bias -m_h |j - i| (fixed slopes)",
                        "Press et al. 2022 sec. 3: fixed head slopes m_h = 2^(-8h/H), no "
                        "parameters. " + _DISTANCE),
    ("kerple_log", "bias"): ("KERPLE (log) bias -r1_h log(1 + r2_h |j - i|)",
                             "Chi et al. 2022 sec. 4, logarithmic variant: r1, r2 > 0 learned "
                             "per head, shared by the stack's layers. " + _DISTANCE),
    ("kerple_power", "bias"): ("KERPLE (power) bias -r1_h |j - i|^r2_h",
                               "Chi et al. 2022 sec. 4, power variant: r1 > 0, 0 < r2 <= 2 "
                               "learned per head, shared by the stack's layers. " + _DISTANCE),
    ("sandwich", "bias"): ("Sandwich bias (p_i.p_j - D/2) H / (8h) (fixed)",
                           "Chi et al. 2023 (Sandwich): the inner product of two sinusoidal "
                           "embeddings of dimension D, divided per head by ALiBi's 8h/H; "
                           "no parameters. " + _DISTANCE),
    ("huang1", "factor"): ("Huang method 1 factor a[l,h][|j - i|] on q.k",
                           "Huang et al. 2020 eqs. 11-12: multiplies the content logit "
                           "q_i.k_j / sqrt(d_h); 1 is plain attention. " + _DISTANCE),
    ("huang2", "factor"): ("Huang method 2 factor a[l,h][j - i] on q.k",
                           "Huang et al. 2020 eqs. 12-13: a signed-distance factor on the "
                           "content logit; 1 is plain attention. " + _DISTANCE),
    ("huang3", "gate"): ("Huang method 3 mean gate mean_d a[l,h][j - i]_d",
                         "Huang et al. 2020 eq. 15: e_ij = sum_d q_id k_jd a[j-i]_d / "
                         "sqrt(d_h). Plotted: content_logits() of all-ones q and k divided "
                         "by d_h, the mean of the gate vector = the factor on q.k for "
                         "queries and keys with equal coordinates; 1 is plain attention."),
    ("huang4", "position-bias"): ("Huang method 4 content-free part (b_Q + b_K).a_{j-i}",
                                  "Huang et al. 2020 eq. 16: (q_i.a + k_j.a) / sqrt(d_h) "
                                  "needs content; plotted is logit_bias() for the query and "
                                  "key of an all-zero layer input (fairseq's projection "
                                  "biases b_Q, b_K): the part no token changes."),
    ("shaw", "position-bias"): ("Shaw key term b_Q.aK[clip(j - i)] / sqrt(d_h)",
                                "Shaw et al. 2018 eq. 4: q_i.aK[c] needs a query; plotted is "
                                "logit_bias() for the query of an all-zero layer input "
                                "(fairseq's q-projection bias b_Q, per head), the part of "
                                "the key term that no token changes. Flat beyond the clip k."),
    ("shaw", "vector-norms"): ("Shaw relative vectors ||aK[c]||, ||aV[c]||",
                               "Shaw et al. 2018 eqs. 3-5: the key and value vectors per "
                               "clipped distance c (shared by the heads), read back through "
                               "logit_bias() with unit queries and value_term() with one-hot "
                               "probabilities."),
    ("xl", "position-bias"): ("Transformer-XL global position term v.W_R R_{i-j} / sqrt(d_h)",
                              "Dai et al. 2019 sec. 3.3, term (d): logit_bias() with q = k = 0, "
                              "which leaves exactly the content-free term per head. (fairseq's "
                              "q-projection bias b_Q adds b_Q.W_R R as well; not included.)"),
    ("rope", "cosine"): ("RoPE content-free pattern: mean_p cos((j - i) theta_p)",
                         "Su et al. 2021 eq. 34: rotate_qk() of all-ones queries and keys; "
                         "each frequency pair p contributes 2 cos((j - i) theta_p) to q.k, "
                         "theta_p = base^(-2p/d_h). Plotted: the mean over pairs (1 at "
                         "distance 0), i.e. q_i.k_j / d_h for constant q = k = 1; the same "
                         "for every head and layer."),
    ("rope", "pairs"): ("RoPE per frequency pair: cos((j - i) theta_p)",
                        "Su et al. 2021 eq. 34: the contribution of each pair of head "
                        "dimensions (rows, p = 0 fastest) by distance, from rotate_qk()."),
    ("xpos", "cosine"): ("xPos content-free pattern: mean_p cos((j - i) theta_p) "
                         "zeta_p^((i - j)/gamma)",
                         "Sun et al. 2023 (XPOS): rotate_qk() of all-ones queries and keys; "
                         "each frequency pair p contributes 2 cos((j - i) theta_p) "
                         "zeta_p^((i - j)/gamma) to q.k, zeta_p = (2p/d_h + 0.4)/1.4, gamma = "
                         "--xpos-scale-base: RoPE's pattern decaying as the key falls behind "
                         "the query (and, in the encoder, growing for keys after it). Plotted: "
                         "the mean over pairs, q_i.k_j / d_h for constant q = k = 1; the same "
                         "for every head and layer."),
    ("xpos", "pairs"): ("xPos per frequency pair: cos((j - i) theta_p) zeta_p^((i - j)/gamma)",
                        "Sun et al. 2023 (XPOS): the contribution of each pair of head "
                        "dimensions (rows, p = 0 fastest and fastest decaying) by distance, "
                        "from rotate_qk()."),
    ("diet_abs", "logits"): ("DIET-ABS positional logits P_Q P_K^T",
                             "Chen et al. 2021b eq. 1: (P_Q P_K^T)_ij per head, from "
                             "low_rank_bias() over positions 0..n-1 (as TUPE's figures)."),
    ("diet_abs_lin", "logits"): ("DIET-ABS-LIN positional logits P_Q P_K^T (n x k)",
                                 "Chen et al. 2021b eq. 4: projected_bias(): query position i "
                                 "against the k projected key rows m of the Linformer E."),
    ("tupe_a", "logits"): ("TUPE positional correlation (p~_i U_Q).(p~_j U_K) / sqrt(2 d_h)",
                           "Ke et al. 2020 eq. 7 (their Fig. 4): the untied positional term "
                           "per head over positions 0..n-1, as the attention adds it."),
    ("tupe_r", "logits"): ("TUPE-R absolute positional correlation",
                           "Ke et al. 2020 eqs. 7, 11: the absolute part per head; the "
                           "bucketed relative part is the t5 picture of this stack."),
    ("fire", "logits"): ("FIRE bias f(psi(i - j) / psi(max(L, i))), psi(x) = log(c x + 1)",
                         "Li et al. 2023 (ICLR 2024) sec. 3: the MLP's output per head for "
                         "query position i (rows) and key position j (columns), from "
                         "pair_bias() over positions 0..n-1 (0 = the first real token). Rows "
                         "i <= L share one function of the distance; past the learned "
                         "threshold L each row is normalised by its own psi(i). Encoder: "
                         "a key after the query gets f(-psi(j - i) / psi(max(L, n - 1 - "
                         "i))), normalised by the tokens after the query: the picture is "
                         "that of a sentence of exactly n tokens."),
    ("cope", "position-bias"): ("CoPE content-free part q.e[p_ij] / sqrt(d_h)",
                                "Golovneva et al. 2024 sec. 3: CoPE reads content (gates "
                                "sigmoid(q_i.k_t) count the positions p_ij = sum_t g_it), so "
                                "nothing is content-free; plotted is what content_logits() "
                                "adds to q.k for the query and keys of an all-zero layer "
                                "input (fairseq's projection biases b_Q, b_K, per head), "
                                "where every gate is the same and p_ij is a multiple of "
                                "|j - i| + 1 (encoder: negative for keys after the query)."),
    ("cope", "position-logits"): ("CoPE position logits q.e[p] / sqrt(d_h) at integer p",
                                  "Golovneva et al. 2024 sec. 3: z[p] = q.e[p] for the query "
                                  "of an all-zero layer input (b_Q) and each integer "
                                  "contextual position p of the table, from "
                                  "position_logits(); a fractional position interpolates "
                                  "between its two neighbours."),
    ("fox", "bias"): ("FoX forget-gate bias sum_t log f_t, content-free part",
                      "Lin et al. 2025 sec. 2: f_t = sigmoid(w_h.x_t + b_h) reads the layer's "
                      "input, so nothing is content-free; plotted is the bias for an "
                      "all-zero input, every gate sigmoid(b_h): (i - j) log sigmoid(b_h) for "
                      "keys up to the query, through the attention's own cumulative sums. "
                      "Encoder: keys after the query read the second gate per head."),
    ("stickbreaking", "weights"): ("Stick-breaking weights of one query",
                                   "Tan et al. 2025 sec. 2: A_ij = beta_ij prod_(j<l<i) (1 - "
                                   "beta_il) for the query at position D and keys 0..D, with "
                                   "the query and keys of an all-zero layer input "
                                   "(fairseq's projection biases), so every beta of a row is "
                                   "the same and the curve is the process's recency alone; "
                                   "what a row leaves is --stickbreaking-remainder's."),
    ("path", "logits"): ("PaTH logits on the sentence, with and without the transforms",
                         "Yang et al. 2025 sec. 2: per decoder layer and head, q_i^T H_i ... "
                         "H_(j+1) k_j / sqrt(d_h) (the model's logits) beside q_i.k_j / "
                         "sqrt(d_h) (the same queries and keys, no transform), the sentence "
                         "read as the decoder's input after </s>; keys after the query are "
                         "masked (0)."),
    ("segments", "logits"): ("Segment term S[l,h][seg(i), seg(j)]",
                             "Chen et al. 2021b eqs. 1-3 (--segment-attention): the learned "
                             "K x K table per head and layer, from pair_bias() with one "
                             "token per segment."),
    ("sinusoidal", "cosine"): ("Sinusoidal input embeddings: cosine similarity",
                               "Vaswani et al. 2017 sec. 3.5 (fairseq's variant): cos(PE_i, "
                               "PE_j) of the embeddings fairseq adds to the input, from the "
                               "model's own module; position 0 = the first real token."),
    ("shape", "cosine"): ("SHAPE's sinusoidal input embeddings: cosine similarity",
                          "Kiyono et al. 2021 (fairseq's sinusoid): cos(PE_i, PE_j) of the "
                          "embeddings added to the input in evaluation; training shifts "
                          "every position of a sequence by one random k in 0..K, which "
                          "leaves these similarities as they are."),
    ("learned", "cosine"): ("Learned input embeddings: cosine similarity",
                            "Gehring et al. 2017 / Devlin et al. 2018: cos(P_i, P_j) of the "
                            "learned position embeddings added to the input, from the "
                            "model's own module; position 0 = the first real token."),
    ("attention", "probabilities"): ("Self-attention probabilities",
                                     "The attention of every layer (rows) and head "
                                     "(columns) on the "
                                     "given sentence (rows: queries, columns: keys), as the "
                                     "model computes them with all its position terms."),
}


def title(name: str, what: str, stack: str) -> str:
    text = TEXT.get((name, what), (f"{name}: {what}", ""))[0]
    return f"{stack}: {text}"


def caption(name: str, what: str, causal: bool) -> str:
    text = TEXT.get((name, what), ("", f"The {what} of the {name} term."))[1]
    if causal and name not in ("sinusoidal", "learned", "shape"):
        text += " Decoder: causal, only keys j <= i exist (the rest is masked)."
    return text
