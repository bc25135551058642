"""fairseq-posenc: Transformer position encodings, exact to their papers, for any PyTorch
model (``fairseq_posenc.nn``) and as a fairseq ``--user-dir`` plugin with its tools.

One distribution whose requirements are the torch-only core's: ``pip install .`` on any
Python from 3.11 with torch gives a working ``fairseq_posenc.nn``, without fairseq. The
fairseq plugin and the tools need fairseq 0.12, which exists for CPython 3.11 and 3.12 only
(the community wheel ``ve-fairseq==0.12.3``, installed with --no-deps, because its
metadata asks for torchaudio, which would replace torch with a CUDA build) and numpy 1.x;
requirements cannot be relaxed by an extra, so those stay out of this file.
``scripts/setup_env.sh`` installs them pinned (requirements.txt) and refuses other Pythons
before creating anything. docs/architecture.md, "Packaging", has the reasons.
"""

from setuptools import find_packages, setup

setup(
    name="fairseq-posenc",
    version="0.1.0",
    description="Transformer position encodings (Shaw, T5, DIET, TUPE, ALiBi, RoPE, ...) for "
                "PyTorch and fairseq",
    long_description=open("README.md", encoding="utf-8").read() if __import__("os").path.exists("README.md") else "",
    long_description_content_type="text/markdown",
    packages=find_packages(include=["fairseq_posenc", "fairseq_posenc.*"]),
    python_requires=">=3.11",
    # the core's only requirement; tested with 2.13 (CPU, CI) and 2.11 (CUDA, the GPU runs)
    install_requires=["torch>=2.6"],
    entry_points={
        "console_scripts": [
            "posenc-inspect = fairseq_posenc.tools.inspection.cli:main",
            "posenc-compare = fairseq_posenc.tools.compare.cli:main",
            "posenc-convert = fairseq_posenc.tools.convert_cli:main",
            "posenc-score = fairseq_posenc.tools.evaluation.cli:main",
            "posenc-hypotheses = fairseq_posenc.tools.hypotheses:main",
            "posenc-benchmark = fairseq_posenc.tools.benchmark.cli:main",
            "posenc-kernels = fairseq_posenc.tools.benchmark.compiled:main",
            "posenc-params = fairseq_posenc.tools.params:main",
            "posenc-prepare-corpus = fairseq_posenc.tools.corpus:main",
            "posenc-prepare-wmt = fairseq_posenc.tools.wmt.cli:main",
            "posenc-reproduce = fairseq_posenc.tools.wmt.reproduce:main",
        ],
    },
    license="MIT",
)
