#!/usr/bin/env python3
"""Write a small synthetic English->German parallel corpus (no network needed).

English sentences come from templates (determiners, adjectives, nouns, verbs, numbers,
prepositional phrases, negation, questions, "because"/"that" clauses) and are translated
by rules into German-like text: a bilingual lexicon, article/adjective agreement by
gender and case (nominative subject, accusative object, case chosen by the preposition),
verb-second main clauses (also after a fronted adverbial or subordinate clause),
verb-final subordinate clauses and a perfect tense with a clause-final participle.
Word order therefore matters, which is what the position encodings are compared on.

The output is deterministic given --seed. Valid and test sentences never occur in train
(nor in each other). It is a sanity check, not real data: BLEU on it is not comparable
to WMT numbers.

Length extrapolation (``--test-long N``): a fourth split, ``test_long.{en,de}``, of N
sentences *longer than any training sentence* (``--long-min-len``..``--long-max-len``
English words; the other splits keep ``--min-len``..``--max-len``). A model trained on
sentences of at most 30 words is evaluated on longer ones, at positions and distances it
never saw in training: this is where relative encodings (which only see ``j - i``, often
clipped) and absolute ones (which see ``i`` and ``j``) part ways. A long sentence is
declarative sentences of the same grammar, extended until it reaches its drawn length by

* coordination: ``..., and <sentence>`` / ``..., und <Satz>``; the German conjunct keeps
  its own word order ("und" takes no position: ``, und gestern hat der Hund ...``), and
  the comma, optional in German between main clauses, is always written in both languages;
* subordination: ``... because <clause>`` / ``..., weil <Nebensatz>`` (also "while",
  "although"), the verb-final subordinate clause of the short sentences.

So every German rule above holds in each part, and the English words, the constructions
inside each part and their translations are those of the training data; only the length
and the chaining are new. The long split has its own random stream (derived from --seed),
so train/valid/test are the same, byte for byte, with or without it
(tests/integration/test_toy_corpus.py pins them by hash).

    python scripts/make_toy_corpus.py --out data/demo/raw --train 20000
    python scripts/make_toy_corpus.py --out data/demo/raw --test-long 200 --long-min-len 40
"""
from __future__ import annotations

import argparse
import os
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

# (English singular, English plural, German singular, German plural, gender)
NOUNS = [
    ("dog", "dogs", "Hund", "Hunde", "m"), ("cat", "cats", "Katze", "Katzen", "f"),
    ("child", "children", "Kind", "Kinder", "n"), ("man", "men", "Mann", "Männer", "m"),
    ("woman", "women", "Frau", "Frauen", "f"), ("teacher", "teachers", "Lehrer", "Lehrer", "m"),
    ("book", "books", "Buch", "Bücher", "n"), ("car", "cars", "Auto", "Autos", "n"),
    ("house", "houses", "Haus", "Häuser", "n"), ("garden", "gardens", "Garten", "Gärten", "m"),
    ("table", "tables", "Tisch", "Tische", "m"), ("city", "cities", "Stadt", "Städte", "f"),
    ("river", "rivers", "Fluss", "Flüsse", "m"), ("apple", "apples", "Apfel", "Äpfel", "m"),
    ("letter", "letters", "Brief", "Briefe", "m"), ("bird", "birds", "Vogel", "Vögel", "m"),
    ("girl", "girls", "Mädchen", "Mädchen", "n"), ("doctor", "doctors", "Arzt", "Ärzte", "m"),
    ("friend", "friends", "Freund", "Freunde", "m"),
    ("window", "windows", "Fenster", "Fenster", "n"),
    ("door", "doors", "Tür", "Türen", "f"), ("school", "schools", "Schule", "Schulen", "f"),
    ("flower", "flowers", "Blume", "Blumen", "f"), ("horse", "horses", "Pferd", "Pferde", "n"),
    ("picture", "pictures", "Bild", "Bilder", "n"), ("bag", "bags", "Tasche", "Taschen", "f"),
]
ADJS = [("big", "groß"), ("small", "klein"), ("old", "alt"), ("young", "jung"), ("red", "rot"),
        ("new", "neu"), ("beautiful", "schön"), ("black", "schwarz"), ("green", "grün"),
        ("clever", "klug"), ("loud", "laut"), ("fast", "schnell"), ("blue", "blau"),
        ("warm", "warm"), ("friendly", "freundlich")]
# (3sg, base, past, German 3sg, German plural, German participle); perfect uses "haben"
TRANSITIVE = [
    ("sees", "see", "saw", "sieht", "sehen", "gesehen"),
    ("finds", "find", "found", "findet", "finden", "gefunden"),
    ("likes", "like", "liked", "mag", "mögen", "gemocht"),
    ("buys", "buy", "bought", "kauft", "kaufen", "gekauft"),
    ("carries", "carry", "carried", "trägt", "tragen", "getragen"),
    ("paints", "paint", "painted", "malt", "malen", "gemalt"),
    ("visits", "visit", "visited", "besucht", "besuchen", "besucht"),
    ("opens", "open", "opened", "öffnet", "öffnen", "geöffnet"),
    ("hears", "hear", "heard", "hört", "hören", "gehört")]
INTRANSITIVE = [
    ("sleeps", "sleep", "slept", "schläft", "schlafen", "geschlafen"),
    ("laughs", "laugh", "laughed", "lacht", "lachen", "gelacht"),
    ("waits", "wait", "waited", "wartet", "warten", "gewartet"),
    ("sings", "sing", "sang", "singt", "singen", "gesungen"),
    ("works", "work", "worked", "arbeitet", "arbeiten", "gearbeitet"),
    ("plays", "play", "played", "spielt", "spielen", "gespielt")]
SAY = [  # verbs that take a "that" clause
    ("says", "say", "said", "sagt", "sagen", "gesagt"),
    ("thinks", "think", "thought", "denkt", "denken", "gedacht"),
    ("knows", "know", "knew", "weiß", "wissen", "gewusst"),
    ("believes", "believe", "believed", "glaubt", "glauben", "geglaubt")]
PREPS = [("with", "mit", "dat"), ("behind", "hinter", "dat"), ("under", "unter", "dat"),
         ("next to", "neben", "dat"), ("in front of", "vor", "dat"), ("from", "von", "dat"),
         ("without", "ohne", "acc"), ("for", "für", "acc"), ("through", "durch", "acc")]
# (English, German, tense it allows: "pres", "past" or None for both)
ADVERBIALS = [("today", "heute", "pres"), ("now", "jetzt", "pres"),
              ("yesterday", "gestern", "past"), ("sometimes", "manchmal", None),
              ("in the evening", "am Abend", None), ("in the morning", "am Morgen", None),
              ("on Sunday", "am Sonntag", None)]
CONJS = [("because", "weil"), ("while", "während"), ("although", "obwohl")]
NUMBERS = [("two", "zwei"), ("three", "drei"), ("four", "vier"), ("five", "fünf"),
           ("six", "sechs"), ("seven", "sieben"), ("eight", "acht"), ("nine", "neun"),
           ("ten", "zehn"), ("eleven", "elf"), ("twelve", "zwölf")]

CASES = {"nom": 0, "acc": 1, "dat": 2}
GENDERS = {"m": 0, "f": 1, "n": 2, "pl": 3}
DER = [["der", "die", "das", "die"], ["den", "die", "das", "die"], ["dem", "der", "dem", "den"]]
DIES = [["er", "e", "es", "e"], ["en", "e", "es", "e"], ["em", "er", "em", "en"]]  # dies-
EIN = [["", "e", "", "e"], ["en", "e", "", "e"], ["em", "er", "em", "en"]]  # ein-, mein-, kein-
ADJ_END = {  # adjective endings after a der-word, an ein-word, or no article (plural only)
    "weak": [["e", "e", "e", "en"], ["en", "e", "e", "en"], ["en"] * 4],
    "mixed": [["er", "e", "es", "en"], ["en", "e", "es", "en"], ["en"] * 4],
    "strong": [["er", "e", "es", "e"], ["en", "e", "es", "e"], ["em", "er", "em", "en"]]}


def noun_phrase(rng: random.Random, case: str, neg: bool = False) -> tuple[str, str, bool]:
    """Return (English, German, is_plural) for a random noun phrase in ``case``.

    With ``neg`` an indefinite phrase becomes German "kein-" (the clause then has no
    "nicht") and numbers are not used.
    """
    en_sg, en_pl, de_sg, de_pl, gender = rng.choice(NOUNS)
    det = rng.choices(["the", "a", "my", "this", "num"], [6, 4, 2, 2, 0 if neg else 2])[0]
    plural = det == "num" or (det in ("the", "my", "this") and rng.random() < 0.3)
    c, g = CASES[case], GENDERS["pl" if plural else gender]
    adjs = rng.sample(ADJS, rng.choices([0, 1, 2], [5, 3, 1])[0])
    if det == "num":
        num = rng.choice(NUMBERS) if rng.random() < 0.8 else (str(rng.randint(13, 99)),) * 2
        (en_det, de_det), decl = num, "strong"
    elif det == "the":
        en_det, de_det, decl = "the", DER[c][g], "weak"
    elif det == "this":
        en_det, de_det, decl = ("these" if plural else "this"), "dies" + DIES[c][g], "weak"
    else:
        de_stem = {"a": "kein" if neg else "ein", "my": "mein"}[det]
        en_det, de_det, decl = det, de_stem + EIN[c][g], "mixed"
    noun = de_pl if plural else de_sg
    if plural and case == "dat" and not noun.endswith(("n", "s")):
        noun += "n"
    en = [en_det] + [a for a, _ in adjs] + [en_pl if plural else en_sg]
    if en[0] == "a" and en[1][0] in "aeiou":
        en[0] = "an"
    de = [de_det] + [d + ADJ_END[decl][c][g] for _, d in adjs] + [noun]
    return " ".join(en), " ".join(de), plural


@dataclass
class Clause:
    """One clause, kept in parts so that each language can order them its own way."""

    en_subj: str
    de_subj: str
    plural: bool
    verb: tuple[str, ...]
    past: bool
    neg: bool
    en_rest: list[str] = field(default_factory=list)  # after the verb: object, PPs, that-clause
    de_mid: list[str] = field(default_factory=list)  # German middle field: object, nicht, PPs
    de_tail: list[str] = field(default_factory=list)  # extraposed ", dass ..." clause

    def english(self, question: bool = False) -> list[str]:
        v3, base, past = self.verb[:3]
        if not (question or self.neg):
            verb = past if self.past else (base if self.plural else v3)
            return [self.en_subj, verb] + self.en_rest
        aux = "did" if self.past else ("do" if self.plural else "does")
        aux += "n't" if self.neg else ""
        head = [aux, self.en_subj] if question else [self.en_subj, aux]
        return head + [base] + self.en_rest

    def german(self, order: str) -> list[str]:
        """``order``: "main" (S V ...), "inv" (V S ..., after a fronted element or in a
        question) or "sub" (verb-final subordinate clause)."""
        v3, vpl, part = self.verb[3:]
        fin = ("haben" if self.plural else "hat") if self.past else (vpl if self.plural else v3)
        end = [part] if self.past else []
        if order == "sub":
            return [self.de_subj] + self.de_mid + end + [fin] + self.de_tail
        head = [self.de_subj, fin] if order == "main" else [fin, self.de_subj]
        return head + self.de_mid + end + self.de_tail


def make_clause(rng: random.Random, depth: int = 0, past: bool | None = None) -> Clause:
    """A random clause; at depth 0 it may be a say-verb with an embedded "that" clause."""
    past = rng.random() < 0.4 if past is None else past
    neg = rng.random() < 0.15
    if rng.random() < 0.1:
        (e1, d1, _), (e2, d2, _) = noun_phrase(rng, "nom"), noun_phrase(rng, "nom")
        subj = (f"{e1} and {e2}", f"{d1} und {d2}", True)
    else:
        subj = noun_phrase(rng, "nom")
    kind = rng.choices(["trans", "intrans", "say"], [5, 3, 2 if depth == 0 else 0])[0]
    verb = rng.choice({"trans": TRANSITIVE, "intrans": INTRANSITIVE, "say": SAY}[kind])
    c = Clause(subj[0], subj[1], subj[2], verb, past, neg)
    if kind == "trans":
        en_obj, de_obj, _ = noun_phrase(rng, "acc", neg)
        c.en_rest.append(en_obj)
        c.de_mid.append(de_obj)
        if neg and de_obj.startswith("kein"):
            neg = False  # "kein" already negates; no extra "nicht"
    if neg:
        c.de_mid.append("nicht")
    if kind == "say":
        sub = make_clause(rng, depth + 1)
        c.en_rest += ["that"] + sub.english()
        c.de_tail = [",", "dass"] + sub.german("sub")
        return c
    for _ in range(rng.choices([0, 1, 2], [4, 4, 1])[0]):
        en_p, de_p, case = rng.choice(PREPS)
        en_np, de_np, _ = noun_phrase(rng, case)
        c.en_rest.append(f"{en_p} {en_np}")
        c.de_mid.append(f"{de_p} {de_np}")
    return c


TEMPLATES = ["plain", "adverbial", "sub_after", "sub_before", "question"]
TEMPLATE_WEIGHTS = [4, 2, 2, 1, 1]


def sentence(rng: random.Random, template: str) -> tuple[list[str], list[str], str]:
    """English and German words of one sentence of ``template``, and its end mark."""
    end = "."
    if template == "adverbial":
        en_adv, de_adv, tense = rng.choice(ADVERBIALS)
        c = make_clause(rng, past=None if tense is None else tense == "past")
        en, de = [en_adv, ","] + c.english(), [de_adv] + c.german("inv")
    elif template in ("sub_after", "sub_before"):
        (en_conj, de_conj), main, sub = rng.choice(CONJS), make_clause(rng, 1), make_clause(rng, 1)
        if template == "sub_after":
            en, de = subordinate(main.english(), main.german("main"), (en_conj, de_conj), sub)
        else:
            en = [en_conj] + sub.english() + [","] + main.english()
            de = [de_conj] + sub.german("sub") + [","] + main.german("inv")
    elif template == "question":
        c = make_clause(rng)
        en, de, end = c.english(question=True), c.german("inv"), "?"
    else:
        c = make_clause(rng)
        en, de = c.english(), c.german("main")
    return en, de, end


def subordinate(en: list[str], de: list[str], conj: tuple[str, str],
                sub: Clause) -> tuple[list[str], list[str]]:
    """``en`` + "because <clause>", ``de`` + ", weil <verb-final clause>" (or another
    conjunction of CONJS)."""
    return en + [conj[0]] + sub.english(), de + [",", conj[1]] + sub.german("sub")


def coordinate(en: list[str], de: list[str], en2: list[str],
               de2: list[str]) -> tuple[list[str], list[str]]:
    """Two declarative sentences as one: "..., and ..." / "..., und ...". German "und"
    takes no position in the clause, so the second sentence keeps its own word order."""
    return en + [",", "and"] + en2, de + [",", "und"] + de2


def finish(words: list[str], end: str) -> str:
    """Words -> sentence text: commas attached, end mark, first letter capitalized."""
    text = " ".join(words).replace(" ,", ",") + end
    return text[0].upper() + text[1:]


def n_words(words: list[str]) -> int:
    """English words of :func:`finish`'s text (commas are attached to the word before)."""
    return sum(len(w.split()) for w in words if w != ",")


def make_pair(rng: random.Random) -> tuple[str, str]:
    """One (English, German) sentence pair from a random template."""
    en, de, end = sentence(rng, rng.choices(TEMPLATES, TEMPLATE_WEIGHTS)[0])
    return finish(en, end), finish(de, end)


def make_long_pair(rng: random.Random, min_len: int, max_len: int) -> tuple[str, str]:
    """One pair of ``min_len``..``max_len`` English words: a declarative sentence extended
    by coordinated sentences and subordinate clauses until it has a drawn number of words
    (or up to 4 more, so that the lengths spread evenly over the range)."""
    target = rng.randint(min_len, max_len)
    statements, weights = TEMPLATES[:4], TEMPLATE_WEIGHTS[:4]  # no questions inside
    for _ in range(1000):
        en, de, _ = sentence(rng, rng.choices(statements, weights)[0])
        while n_words(en) < target:
            if rng.random() < 0.6:
                en2, de2, _ = sentence(rng, rng.choices(statements, weights)[0])
                en, de = coordinate(en, de, en2, de2)
            else:
                en, de = subordinate(en, de, rng.choice(CONJS), make_clause(rng, 1))
        if n_words(en) <= min(max_len, target + 4):
            return finish(en, "."), finish(de, ".")
    raise RuntimeError(f"could not build a sentence of {target} words")


def generate(rng: random.Random, n: int, seen: set[str], min_len: int, max_len: int,
             make: Callable[[random.Random], tuple[str, str]] = make_pair
             ) -> list[tuple[str, str]]:
    """``n`` new pairs from ``make`` with ``min_len``..``max_len`` English words, English
    side not in ``seen``."""
    pairs: list[tuple[str, str]] = []
    for _ in range(200 * n + 1000):
        if len(pairs) == n:
            return pairs
        en, de = make(rng)
        if min_len <= len(en.split()) <= max_len and en not in seen:
            seen.add(en)
            pairs.append((en, de))
    raise RuntimeError(f"could not draw {n} distinct sentences; lower the sizes")


def write_atomic(path: Path, lines: list[str]) -> None:
    """Write ``lines`` to a temporary file next to ``path``, then rename it into place."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    os.replace(tmp, path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="output directory")
    ap.add_argument("--seed", type=int, default=1, help="random seed (output is deterministic)")
    ap.add_argument("--train", type=int, default=20000, help="training sentence pairs")
    ap.add_argument("--valid", type=int, default=300, help="validation sentence pairs")
    ap.add_argument("--test", type=int, default=300, help="test sentence pairs")
    ap.add_argument("--min-len", type=int, default=4, help="min English words per sentence")
    ap.add_argument("--max-len", type=int, default=30, help="max English words per sentence")
    ap.add_argument("--test-long", type=int, default=0, metavar="N",
                    help="also write test_long.{en,de}: N pairs longer than any training "
                         "sentence, for length extrapolation (default 0: none)")
    ap.add_argument("--long-min-len", type=int, metavar="WORDS",
                    help="min English words of a test_long sentence (default --max-len + 1; "
                         "must exceed --max-len)")
    ap.add_argument("--long-max-len", type=int, metavar="WORDS",
                    help="max English words of a test_long sentence (default 2 * --max-len)")
    args = ap.parse_args()
    long_min = args.max_len + 1 if args.long_min_len is None else args.long_min_len
    long_max = 2 * args.max_len if args.long_max_len is None else args.long_max_len
    if args.test_long:
        if long_min <= args.max_len:
            ap.error(f"--long-min-len {long_min} must exceed --max-len {args.max_len}: "
                     "test_long is for sentences longer than any training sentence")
        if long_max < long_min:
            ap.error(f"--long-max-len {long_max} is below --long-min-len {long_min}")

    rng, seen = random.Random(args.seed), set()
    args.out.mkdir(parents=True, exist_ok=True)
    # Held-out splits are drawn first, so train can never contain them.
    for split in ("test", "valid", "train"):
        pairs = generate(rng, getattr(args, split), seen, args.min_len, args.max_len)
        write_atomic(args.out / f"{split}.en", [en for en, _ in pairs])
        write_atomic(args.out / f"{split}.de", [de for _, de in pairs])
        print(f"{split}: {len(pairs)} sentence pairs -> {args.out}/{split}.{{en,de}}")
    if args.test_long:
        # A stream of its own, so the splits above do not depend on --test-long.
        long_rng = random.Random(f"test_long:{args.seed}")
        pairs = generate(long_rng, args.test_long, seen, long_min, long_max,
                         lambda r: make_long_pair(r, long_min, long_max))
        write_atomic(args.out / "test_long.en", [en for en, _ in pairs])
        write_atomic(args.out / "test_long.de", [de for _, de in pairs])
        print(f"test_long: {len(pairs)} sentence pairs of {long_min}-{long_max} words "
              f"-> {args.out}/test_long.{{en,de}}")


if __name__ == "__main__":
    main()
