"""The preparation of one dataset, step by step: download and extract the corpora, gather
them into one training pair, take the validation and test sets from sacreBLEU, tokenize,
clean, learn and apply joint BPE (or SentencePiece), binarize with ``fairseq-preprocess
--joined-dictionary``, write the manifest.

Decisions:

* Each step is a method that returns its stamp (or key): a step runs again only if its stamp
  or outputs are missing or a setting it depends on changed, and then the later steps run
  again too, since their keys hold the earlier keys (``--max-ratio`` redoes cleaning, BPE
  and binarization, not tokenization).
* Source = en, target = de|cs; fairseq's translation task loads the other direction from the
  same files, so one preparation serves both.
* The work itself lives in the other modules (:mod:`.download`, :mod:`.text`,
  :mod:`.testsets`, :mod:`.czeng`, :mod:`.manifest`); this one says what runs in which order,
  on which files, with which key.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import shutil
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from ..textprep.files import (PrepareError, Stamps, atomic_output, check_parallel, count_lines,
                              key_of, open_text, read_lines, sanitize, write_text_atomic)
from ..textprep.text import (TOKENIZER, Cleaning, apply_sentencepiece, apply_subword_nmt,
                             binarize, clean_corpus, learn_subword_nmt, moses_process_file,
                             train_sentencepiece)
from . import manifest as contract
from .catalog import CORPORA, CZENG17_FILTER, PUBLISHED_ARCHIVES, DatasetSpec, EvalSet
from .common import Options, log
from .czeng import czeng17_bad_blocks, czeng_fingerprint, iter_czeng
from .download import Downloader, extract_members, mirror_relpath, parse_sums, read_url_text
from .testsets import mirror_sources, sacrebleu_fetch


class Preparation:
    """``Preparation(spec, opts).run()`` prepares ``spec`` into ``opts.dest`` and returns
    the manifest (``{}`` with ``--download-only``); raises :class:`PrepareError`."""

    def __init__(self, spec: DatasetSpec, opts: Options):
        self.spec = spec
        self.o = opts
        self.dest = opts.dest
        self.work = opts.dest / "work"
        self.stamps = Stamps(opts.dest)
        self.src, self.tgt = spec.langs
        self.sha256: Dict[str, str] = {}
        self.md5: Dict[str, str] = {}
        if opts.mirror:
            self.sha256 = parse_sums(read_url_text(f"{opts.mirror}/SHA256SUMS", opts.timeout))
            self.md5 = parse_sums(read_url_text(f"{opts.mirror}/MD5SUMS", opts.timeout))
        self.downloader = Downloader(
            opts.download_dir,
            mirror=opts.mirror,
            expected_sha256={
                u: self.sha256[mirror_relpath(u)]
                for u in self._urls()
                if mirror_relpath(u) in self.sha256
            },
            retries=opts.retries,
            retry_wait=opts.retry_wait,
            timeout=opts.timeout,
            published=PUBLISHED_ARCHIVES if opts.check_published and not opts.mirror else None,
        )

    # -- helpers ------------------------------------------------------------------------
    def corpora(self) -> List[str]:
        names = list(self.spec.corpora)
        if self.o.paracrawl:
            names.append("paracrawl_v1")
        return names

    def _urls(self) -> List[str]:
        urls = {CORPORA[c].files[self.spec.pair][0] for c in self.corpora()}
        if self.o.czeng and self.o.czeng_release == "1.7":
            urls.add(CZENG17_FILTER)
        return sorted(urls)

    def eval_sets(self) -> List[EvalSet]:
        seen, out = set(), []
        for e in (self.spec.valid, *self.spec.tests):
            if e.testset not in seen:
                seen.add(e.testset)
                out.append(e)
        return out

    def _skip(self, step: str, key: str) -> Optional[dict]:
        stamp = self.stamps.done(step, key)
        if stamp:
            log(f"{step}: done, skipping")
        return stamp

    # -- steps --------------------------------------------------------------------------
    def run(self) -> dict:
        log(f"dataset {self.spec.name} -> {self.dest} ({self.spec.paper})")
        self.dest.mkdir(parents=True, exist_ok=True)
        if self.o.download_only:
            for url in self._urls():
                self.downloader.fetch(url)
            self.step_eval_sets()
            log("downloads complete (--download-only)")
            return {}
        extract_keys = [self.step_extract(c) for c in self.corpora()]
        gather = self.step_gather(extract_keys)
        refs = self.step_eval_sets()
        tok = self.step_tokenize_train(gather["key"])
        clean = self.step_clean(tok, gather)
        eval_tok = {
            e.testset: self.step_tokenize_eval(e, refs[e.testset]["key"]) for e in self.eval_sets()
        }
        model = self.step_learn_bpe(clean["key"])
        bpe = self.step_apply_bpe(model["key"], clean["key"], eval_tok)
        binarized = self.step_binarize(bpe)
        return self.write_manifest(gather, clean, refs, model, binarized)

    def step_extract(self, corpus: str) -> str:
        url, prefix = CORPORA[corpus].files[self.spec.pair]
        outputs = {
            f"{prefix}.{lang}": self.work / "extracted" / corpus / f"{prefix}.{lang}"
            for lang in self.spec.langs
        }
        step = f"extract.{corpus}"
        key = key_of({"url": url, "members": sorted(outputs)})
        if self._skip(step, key):
            return key
        archive, digest = self.downloader.fetch(url)
        log(f"{step}: {', '.join(outputs)} from {archive.name}")
        extract_members(archive, outputs)
        files = [outputs[f"{prefix}.{lang}"] for lang in self.spec.langs]
        n = check_parallel(files, f"{CORPORA[corpus].title} in {archive.name}")
        self.stamps.mark(step, key, files, {"archive": archive.name, "sha256": digest, "pairs": n})
        return key

    def _raw_train(self) -> List[Path]:
        return [self.work / f"train.raw.{lang}" for lang in self.spec.langs]

    def step_gather(self, extract_keys: List[str]) -> dict:
        czeng = self.o.czeng
        release = self.o.czeng_release
        czeng_filter = (self.downloader.fetch(CZENG17_FILTER)
                        if czeng and release == "1.7" else None)
        key = key_of({
            "extract": extract_keys,
            "czeng": czeng_fingerprint(czeng) if czeng else None,
            "czeng_release": release if czeng else None,
            "czeng17_filter": czeng_filter[1] if czeng_filter else None,
            "v": 2,
        })
        outs = self._raw_train()
        stamp = self._skip("gather", key)
        if stamp:
            return stamp
        counts = {}
        with contextlib.ExitStack() as stack:
            tmps = [stack.enter_context(atomic_output(o)) for o in outs]
            fouts = [stack.enter_context(open_text(t, "w")) for t in tmps]
            for corpus in self.corpora():
                info = self.stamps.get(f"extract.{corpus}")
                files = [self.dest / o for o in info["outputs"]]
                n = check_parallel(files, CORPORA[corpus].title)
                for f, fout in zip(files, fouts):
                    with open_text(f) as fin:
                        for line in fin:
                            fout.write(sanitize(line) + "\n")
                counts[corpus] = n
                log(f"gather: {corpus}: {n} pairs")
            if czeng:
                n = 0
                blocks = czeng17_bad_blocks(czeng_filter[0]) if czeng_filter else set()
                for cs, en in iter_czeng(czeng, blocks):
                    fouts[0].write(sanitize(en) + "\n")
                    fouts[1].write(sanitize(cs) + "\n")
                    n += 1
                counts[f"czeng_{release}"] = n
                log(f"gather: CzEng {release} ({czeng}): {n} pairs")
            for f in fouts:
                f.close()
            total = check_parallel(tmps, "gathered training data")
        return self.stamps.mark("gather", key, outs, {"pairs": counts, "total": total})

    def step_eval_sets(self) -> Dict[str, dict]:
        """refs/{testset}.{lang} for the validation and test sets, through sacreBLEU."""
        x = self.spec.other
        fwd, rev = f"en-{x}", f"{x}-en"
        todo, results = [], {}
        for e in self.eval_sets():
            urls = mirror_sources(e.sacrebleu, self.o.mirror, self.md5)
            # The key holds the md5s, not the mirror's address (a test server's port changes).
            md5s = [m for _, m in urls] if urls else None
            key = key_of({"sacrebleu": e.sacrebleu, "langpairs": [fwd, rev], "md5": md5s})
            stamp = self._skip(f"refs.{e.testset}", key)
            if stamp:
                results[e.testset] = stamp
            else:
                todo.append((e, key, urls))
        if not todo:
            return results
        requests = []
        for e, _key, urls in todo:
            item = {"name": e.sacrebleu, "langpairs": [fwd, rev]}
            if urls:
                item.update(urls=[u for u, _ in urls], md5=[m for _, m in urls])
            requests.append(item)
        cache = self.o.sacrebleu_dir
        log(f"sacreBLEU: {', '.join(r['name'] for r in requests)} (cache {cache})")
        got = sacrebleu_fetch(requests, cache)
        for e, key, _urls in todo:
            files = got[e.sacrebleu]
            src_f, ref_f = Path(files[fwd]["src"]), Path(files[fwd]["refs"][0])
            n = check_parallel([src_f, ref_f], f"sacreBLEU {e.sacrebleu} {fwd}")
            if n == 0:
                raise PrepareError(
                    f"sacreBLEU gave an empty {e.sacrebleu} {fwd} ({src_f}); "
                    f"delete {cache / e.sacrebleu} and rerun"
                )
            rsrc = read_lines(Path(files[rev]["src"]))
            rref = read_lines(Path(files[rev]["refs"][0]))
            same = rsrc == read_lines(ref_f) and rref == read_lines(src_f)
            if not same:
                log(
                    f"WARNING: sacreBLEU's {e.sacrebleu} {rev} is not the reverse of {fwd}; "
                    f"refs/{e.testset}.* hold the {fwd} set"
                )
            outs = []
            for lang, f in ((self.src, src_f), (self.tgt, ref_f)):
                out = self.dest / "refs" / f"{e.testset}.{lang}"
                with atomic_output(out) as tmp:
                    shutil.copyfile(f, tmp)
                outs.append(out)
            results[e.testset] = self.stamps.mark(
                f"refs.{e.testset}",
                key,
                outs,
                {"sacrebleu": e.sacrebleu, "sentences": n, "reverse_identical": same},
            )
            log(f"refs.{e.testset}: {n} sentences (sacreBLEU {e.sacrebleu} {fwd})")
        return results

    @property
    def _tokenize(self) -> bool:
        return self.o.bpe == "subword-nmt"

    def _text_settings(self) -> dict:
        return {
            "moses_tokenize": self._tokenize,
            "tokenizer": TOKENIZER if self._tokenize else None,
            "v": 2,
        }

    def step_tokenize_train(self, gather_key: str) -> str:
        key = key_of({"gather": gather_key, **self._text_settings()})
        outs = [self.work / f"train.tok.{lang}" for lang in self.spec.langs]
        if self._skip("tokenize.train", key):
            return key
        for lang, src, out in zip(self.spec.langs, self._raw_train(), outs):
            what = "tokenize" if self._tokenize else "clean up whitespace in"
            log(f"tokenize.train: {what} {src.name} ({self.o.workers} workers)")
            moses_process_file(src, out, lang, self._tokenize, self.o.workers)
        check_parallel(outs, "tokenized training data")
        self.stamps.mark("tokenize.train", key, outs)
        return key

    @property
    def cleaning(self) -> Cleaning:
        """The dataset's cleaning (its paper's), with the values given on the command line."""
        o = self.o
        given = {k: v for k, v in (("min_len", o.min_len), ("max_len", o.max_len),
                                   ("max_ratio", o.max_ratio)) if v is not None}
        return dataclasses.replace(self.spec.cleaning, **given)

    def step_clean(self, tok_key: str, gather: dict) -> dict:
        c = self.cleaning
        key = key_of({"tok": tok_key, "cleaning": dataclasses.asdict(c), "v": 2})
        ins = [self.work / f"train.tok.{lang}" for lang in self.spec.langs]
        outs = [self.work / f"train.clean.{lang}" for lang in self.spec.langs]
        stamp = self._skip("clean", key)
        if stamp:
            return stamp
        read, kept, per_corpus = clean_corpus(tuple(ins), tuple(outs), c,
                                              list(gather["info"]["pairs"].items()))
        paper = f"; the paper: {c.paper_pairs:,}" if c.paper_pairs else ""
        log(f"clean: kept {kept:,} of {read:,} pairs{paper} ({c.rule or 'as given'}; tokens "
            f"{c.min_len}..{c.max_len or 'any'}, ratio <= {c.max_ratio or 'any'})")
        for corpus, counts in per_corpus.items():
            log(f"clean: {corpus}: kept {counts['kept']:,} of {counts['raw']:,}")
        if kept == 0:
            raise PrepareError(
                f"cleaning kept no training pair of {read}: check {ins[0]} and {ins[1]}"
            )
        return self.stamps.mark("clean", key, outs,
                                {"raw": read, "clean": kept, "per_corpus": per_corpus})

    def step_tokenize_eval(self, e: EvalSet, refs_key: str) -> str:
        key = key_of({"refs": refs_key, **self._text_settings()})
        step = f"tokenize.{e.testset}"
        outs = [self.work / f"{e.testset}.tok.{lang}" for lang in self.spec.langs]
        if self._skip(step, key):
            return key
        for lang, out in zip(self.spec.langs, outs):
            src = self.dest / "refs" / f"{e.testset}.{lang}"
            moses_process_file(src, out, lang, self._tokenize, 1)
        self.stamps.mark(step, key, outs)
        return key

    def step_learn_bpe(self, clean_key: str) -> dict:
        o = self.o
        key = key_of({"clean": clean_key, **contract.bpe_settings(o)})
        stamp = self._skip("bpe.learn", key)
        if stamp:
            return stamp
        bdir = self.dest / "bpe"
        ins = [self.work / f"train.clean.{lang}" for lang in self.spec.langs]
        if o.bpe == "subword-nmt":
            codes = bdir / "codes"
            vocabs = [bdir / f"vocab.{lang}" for lang in self.spec.langs]
            log(f"bpe.learn: subword-nmt, {o.bpe_size} merges")
            learned = learn_subword_nmt(ins, codes, vocabs, o.bpe_size, o.workers)
            outs = [codes, *vocabs]
            info = {"learned_merges": learned}
        else:
            model = bdir / "spm.model"
            log(f"bpe.learn: sentencepiece {o.spm_model_type}, vocabulary {o.bpe_size}")
            train_sentencepiece(ins, model, o.bpe_size, o.spm_model_type, o.spm_sample, o.workers)
            outs = [model, model.with_suffix(".vocab")]
            info = {}
        settings = contract.bpe_json(self.spec, o)
        write_text_atomic(bdir / "bpe.json", json.dumps(settings, indent=1) + "\n")
        write_text_atomic(bdir / "README", contract.bpe_readme(self.spec, o))
        return self.stamps.mark("bpe.learn", key, [*outs, bdir / "bpe.json", bdir / "README"], info)

    def step_apply_bpe(
        self, model_key: str, clean_key: str, eval_tok: Dict[str, str]
    ) -> Dict[str, Tuple[List[Path], str]]:
        o = self.o
        bdir = self.dest / "bpe"
        jobs = [("train", self.work / "train.clean", clean_key)]
        jobs += [(t, self.work / f"{t}.tok", k) for t, k in eval_tok.items()]
        result = {}
        for name, prefix, in_key in jobs:
            step = f"bpe.apply.{name}"
            key = key_of({"model": model_key, "input": in_key})
            outs = [self.work / "bpe" / f"{name}.{lang}" for lang in self.spec.langs]
            result[name] = (outs, key)
            if self._skip(step, key):
                continue
            for lang, out in zip(self.spec.langs, outs):
                src = Path(f"{prefix}.{lang}")
                if o.bpe == "subword-nmt":
                    apply_subword_nmt(
                        src,
                        out,
                        bdir / "codes",
                        bdir / f"vocab.{lang}",
                        o.vocab_threshold,
                        o.workers if name == "train" else 1,
                    )
                else:
                    apply_sentencepiece(src, out, bdir / "spm.model", o.workers)
            check_parallel(outs, f"BPE-encoded {name}")
            self.stamps.mark(step, key, outs)
        log(f"bpe.apply: {', '.join(result)} ready")
        return result

    def step_binarize(self, bpe: Dict[str, Tuple[List[Path], str]]) -> dict:
        s = self.spec
        prefix = lambda name: str(self.work / "bpe" / name)  # noqa: E731
        tests = [e.testset for e in s.tests]
        key = key_of(
            {
                "inputs": {n: k for n, (_, k) in bpe.items()},
                "valid": s.valid.testset,
                "tests": tests,
            }
        )
        stamp = self._skip("binarize", key)
        if stamp:
            return stamp
        bin_dir = self.dest / "bin"
        logfile = self.work / "preprocess.log"
        log(f"binarize: fairseq-preprocess -> {bin_dir} (log {logfile})")
        binarize(self.src, self.tgt, prefix("train"), prefix(s.valid.testset),
                 [prefix(t) for t in tests], bin_dir, self.o.workers, logfile)
        splits = {"train": "train", "valid": s.valid.testset}
        splits.update({split: t for t, split in s.test_splits.items()})
        sizes = {}
        for split, name in splits.items():
            n = count_lines(bpe[name][0][0])
            sizes[split] = n
        outs = [
            bin_dir / f"{sp}.{self.src}-{self.tgt}.{lang}.{ext}"
            for sp in splits
            for lang in s.langs
            for ext in ("bin", "idx")
        ]
        outs += [bin_dir / f"dict.{lang}.txt" for lang in s.langs]
        return self.stamps.mark("binarize", key, outs, {"splits": splits, "sizes": sizes})

    def write_manifest(self, gather: dict, clean: dict, refs: Dict[str, dict], model: dict,
                       binarized: dict) -> dict:
        s = self.spec
        # bpe.json as written when BPE was learned (a rerun may have skipped that step)
        bpe = json.loads((self.dest / "bpe" / "bpe.json").read_text())
        manifest = contract.build_manifest(s, self.o, self.cleaning, gather, clean, refs,
                                           binarized, bpe)
        write_text_atomic(self.dest / "manifest.json", json.dumps(manifest, indent=1) + "\n")
        tests = ", ".join(e.testset for e in s.tests)
        sizes = binarized["info"]["sizes"]
        log(
            f"done: {self.dest / 'manifest.json'} (train {sizes['train']} pairs; "
            f"valid {s.valid.testset}; tests {tests})"
        )
        return manifest
