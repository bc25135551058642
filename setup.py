"""fairseq-posenc: position encodings for fairseq Transformers (a --user-dir plugin).

Python: CPython 3.11 or 3.12. fairseq itself is not listed in install_requires: the
installable build for those is the community wheel ``ve-fairseq==0.12.3`` (wheels for cp311
and cp312, none for 3.13; the official fairseq 0.12.2 does not build there), and it must be
installed with --no-deps (its metadata asks for torchaudio, which would replace torch 2.13
with a CUDA build). numpy 1.26.4, which fairseq 0.12 needs, has no wheel for 3.13 either.
scripts/setup_env.sh does all of this, and refuses other Pythons before creating anything.
"""

from setuptools import find_packages, setup

setup(
    name="fairseq-posenc",
    version="0.1.0",
    description="Transformer position encodings (Shaw, T5, DIET, TUPE, ...) for fairseq",
    long_description=open("README.md", encoding="utf-8").read() if __import__("os").path.exists("README.md") else "",
    long_description_content_type="text/markdown",
    packages=find_packages(include=["fairseq_posenc", "fairseq_posenc.*"]),
    python_requires=">=3.11,<3.13",
    install_requires=[
        "torch>=2.6",
        "numpy<2",
        "sacrebleu>=2.4",
        "sentencepiece",
        "sacremoses",
        "subword-nmt",
        "matplotlib",
    ],
    entry_points={
        "console_scripts": [
            "posenc-inspect = fairseq_posenc.inspection.cli:main",
            "posenc-compare = fairseq_posenc.compare.cli:main",
            "posenc-score = fairseq_posenc.evaluation.cli:main",
            "posenc-hypotheses = fairseq_posenc.hypotheses:main",
            "posenc-benchmark = fairseq_posenc.benchmark.cli:main",
            "posenc-kernels = fairseq_posenc.kernels.compiled:main",
            "posenc-params = fairseq_posenc.params:main",
            "posenc-prepare-corpus = fairseq_posenc.corpus:main",
            "posenc-prepare-wmt = fairseq_posenc.wmt.cli:main",
            "posenc-reproduce = fairseq_posenc.wmt.reproduce:main",
        ],
    },
    license="MIT",
)
