"""Which framework a config is written for, recognised by its keys (not its name), and the
reading of every file and command line given with --from / --from-args into one
ConfigPlan: files in the order given, a later one over an earlier one for the same key."""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import replace
from pathlib import Path
from typing import Any

from trainmem.core.errors import PlanError
from trainmem.sources import files
from trainmem.sources.configs import (
    accelerate,
    axolotl,
    command_line,
    deepspeed,
    llama_factory,
    llama_factory_v1,
    mlx_lm,
    shell_script,
    trainer_args,
    unsloth_script,
)
from trainmem.sources.configs.common import (
    FIELD,
    ConfigPlan,
    Doc,
    Reading,
    named_path,
    resolve_named,
)
from trainmem.sources.configs.loader import read_doc

Reader = Callable[[Doc], ConfigPlan]


def _readers() -> dict[str, tuple[Callable[[Doc], int], Reader]]:
    return {
        "axolotl": (axolotl.looks_like, lambda d: axolotl.read(d, read_named)),
        "LLaMA-Factory": (llama_factory.looks_like, lambda d: llama_factory.read(d, read_named)),
        "LLaMA-Factory v1": (
            llama_factory_v1.looks_like,
            lambda d: llama_factory_v1.read(d, read_named),
        ),
        "DeepSpeed": (deepspeed.looks_like, deepspeed.read),
        "mlx-lm": (mlx_lm.looks_like, mlx_lm.read),
        "accelerate": (accelerate.looks_like, lambda d: accelerate.read(d, read_named)),
        "TrainingArguments": (trainer_args.looks_like, _read_trainer_args),
    }


def _read_trainer_args(doc: Doc) -> ConfigPlan:
    """TrainingArguments, or TRL's SFTConfig as `trl sft --config FILE` reads it: the keys
    SFTConfig does not take (accelerate_config, num_processes) go to accelerate launch
    (trl/cli/commands/training.py TrainingCommand.run), as on a command line."""
    if not trainer_args.is_trl(doc):
        return trainer_args.read(doc, read_named)
    data = dict(doc.data)
    launch = _trl_launch(data, doc.name, doc.lines, doc.path, dict(doc.shown_as))
    plan = trainer_args.read(replace(doc, data=data), read_named)
    return fold(launch, plan) if launch is not None else plan


def detect(doc: Doc) -> str:
    """The framework whose keys the document has most of; PlanError when none."""
    scores = {name: looks(doc) for name, (looks, _) in _readers().items()}
    best = max(scores, key=lambda n: scores[n])
    if scores[best] == 0:
        raise PlanError(
            FIELD,
            f"{doc.name}: not a training config trainmem reads (no key of axolotl, "
            "LLaMA-Factory, TRL/TrainingArguments, DeepSpeed, accelerate or mlx-lm, such as "
            "base_model, finetuning_type, per_device_train_batch_size, zero_optimization, "
            "distributed_type or fine_tune_type)",
        )
    return best


def read_doc_plan(doc: Doc) -> ConfigPlan:
    return _readers()[detect(doc)][1](doc)


# The files being read, outermost first: a config naming one of them again is a loop.
_OPEN: ContextVar[tuple[Path, ...]] = ContextVar("open_configs", default=())
MAX_DEPTH = 8  # configs naming configs: no framework's own layout goes past three


@contextmanager
def _reading(path: Path, named_by: str | None) -> Iterator[None]:
    chain = _OPEN.get()
    try:
        key = path.resolve()
    except (OSError, RuntimeError, ValueError):  # a symlink loop, a NUL byte: read_doc says
        key = path
    where = f"{named_by}: " if named_by else ""
    if key in chain:
        raise PlanError(
            FIELD,
            f"{where}{files.show(path)} is already being read: configs that name each other loop",
        )
    if len(chain) >= MAX_DEPTH:
        raise PlanError(FIELD, f"{where}configs name configs more than {MAX_DEPTH} deep")
    token = _OPEN.set((*chain, key))
    try:
        yield
    finally:
        _OPEN.reset(token)


def read_file(path: Path) -> ConfigPlan:
    with _reading(path, None):
        if unsloth_script.is_script(path):  # Python: read with ast, never run
            return unsloth_script.read_file(path, read_named)
        if shell_script.is_script(path):  # its training command, never run
            return shell_script.read_file(path, read_command)
        return read_doc_plan(read_doc(path))


def read_named(path: Path, named_by: str) -> ConfigPlan:
    """A DeepSpeed or accelerate file that a config names by path."""
    with _reading(path, named_by):
        try:
            doc = read_doc(path)
        except PlanError as exc:
            if files.kind(path) is None:
                raise PlanError(FIELD, f"{named_by}: no such file: {files.show(path)}") from None
            raise exc from None
        return read_doc_plan(doc)


def read_command(text: str, cwd: Path | None = None, name: str = command_line.NAME) -> ConfigPlan:
    """A training command line: the launcher's options, then the program's arguments
    (over the config file it names, if any). ``name`` is how its keys are shown (a
    script's line)."""
    cmd = command_line.parse(text, name)
    program = cmd.program.split()
    if program[0] == "trl" and program[1:] != ["sft"]:
        raise PlanError(
            name,
            f"`{cmd.program}` is not planned: only `trl sft` (supervised fine-tuning) is; "
            "DPO, KTO, reward and GRPO steps hold reference models, pairs or generations",
        )
    if program[0] == "mlx_lm" and program[1:] != ["lora"]:
        raise PlanError(name, f"`{cmd.program}` is not planned: only `mlx_lm lora` trains")
    here = (cwd or Path.cwd()) / "command"  # paths in a command are the shell's
    args_doc = Doc(name, cmd.args, {}, here, command=True)
    data: dict[str, Any] = dict(cmd.args)
    lines: Mapping[str, int] = {}
    path: Path | None = here
    shown_as: dict[str, str] = {}
    doc_name = name
    if cmd.config_file:
        base = read_doc(named_path(args_doc, "config", cmd.config_file))
        data, lines, path, doc_name = {**base.data, **cmd.args}, base.lines, base.path, base.name
        shown_as = {k: name for k in cmd.args}
    trl = program[0] == "trl"
    launch: ConfigPlan | None = None
    if trl:  # what SFTConfig does not take goes to accelerate launch (cli/commands/training.py)
        launch = _trl_launch(data, doc_name, lines, path, shown_as)
    doc = Doc(doc_name, data, lines, path, shown_as, command=not cmd.config_file)
    if program[0] in ("mlx_lm", "mlx_lm.lora"):
        plan = mlx_lm.read(doc)  # options over the --config file's keys (lora.py main)
    elif program[0] in ("llamafactory-cli", "lmf"):  # --key value too (hparams/parser.py)
        # USE_V1 picks v1's launcher (cli.py:19-22, extras/misc.py:258-260 is_env_enabled)
        v1 = cmd.env.get("USE_V1", "").lower() in ("true", "y", "1")
        if v1 or llama_factory_v1.looks_like(doc) > llama_factory.looks_like(doc):
            plan = llama_factory_v1.read(doc, read_named)
        else:
            plan = llama_factory.read(doc, read_named)
        launch = _llama_factory_launch(cmd, name, here)  # v1/launcher.py:48-53 alike
    elif program[0] == "axolotl":
        plan = axolotl.read(doc, read_named)
    elif cmd.config_file and not trl:  # a script's config (LLaMA-Factory's src/train.py)
        found = detect(doc)
        reader = _readers()[found][1] if found.startswith(("axolotl", "LLaMA-Factory")) else None
        plan = reader(doc) if reader else trainer_args.read(doc, read_named)
    else:
        plan = trainer_args.read(doc, read_named, trl=trl or None)
    if launch is not None:
        plan = fold(launch, plan)
    launcher = _launcher_plan(cmd, cwd, name)
    return fold(launcher, plan) if launcher is not None else plan


# `trl sft --accelerate_config NAME`: a file, else one bundled with TRL
# (trl/cli/accelerate_config.py:19-47 resolve_accelerate_config_argument).
_BUNDLED = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")
_TRL_LAUNCH = ("accelerate_config", "num_processes", "num_machines")


def _trl_launch(
    data: dict[str, Any],
    name: str,
    lines: Mapping[str, int],
    path: Path | None,
    shown_as: dict[str, str],
) -> ConfigPlan | None:
    """The accelerate launch that `trl sft` runs: --accelerate_config (a path, else a
    config bundled with the installed TRL), --num_processes / --num_machines over it."""
    opts = {k: data.pop(k) for k in _TRL_LAUNCH if k in data}
    if not opts:
        return None
    doc = Doc(name, opts, lines, path, shown_as)
    plan: ConfigPlan | None = None
    config = doc.text("accelerate_config")
    if config:
        file, note = resolve_named(doc, "accelerate_config", config)
        try:
            there = files.kind(file)
        except files.FileReadError as exc:
            raise doc.error("accelerate_config", str(exc)) from None
        if there is None and _BUNDLED.fullmatch(config):
            file = _bundled_trl_config(doc, config)
        plan = read_file(file)
        if note:
            plan = replace(plan, notes=(*plan.notes, note))
    rest = {k: v for k, v in opts.items() if k != "accelerate_config"}
    if rest:  # processes over the config's (launch.py: the flag beats the file)
        rest["distributed_type"] = "MULTI_GPU"
        extra = accelerate.read(Doc(name, rest, lines, path, shown_as), read_named)
        plan = fold(plan, extra) if plan is not None else extra
    return plan


def _bundled_trl_config(doc: Doc, config: str) -> Path:
    """trl/accelerate_configs/NAME.yaml of the installed TRL, found without importing it."""
    try:
        spec = importlib.util.find_spec("trl")
    except (ImportError, ValueError):
        spec = None
    folders = list(spec.submodule_search_locations or []) if spec else []
    if not folders:
        raise doc.error(
            "accelerate_config",
            f"{files.show(config)} is no file, and TRL is not installed here to name one of "
            "its bundled configs: give the accelerate config's path",
        )
    candidate = Path(folders[0]) / "accelerate_configs" / f"{config}.yaml"
    if files.kind(candidate) != "file":
        bundled = sorted(p.stem for p in (Path(folders[0]) / "accelerate_configs").glob("*.yaml"))
        raise doc.error(
            "accelerate_config",
            f"{files.show(config)} is neither a file nor a config bundled with TRL "
            f"({', '.join(bundled[:20]) or 'none'})",
        )
    return candidate


def _llama_factory_launch(cmd: command_line.Command, name: str, here: Path) -> ConfigPlan | None:
    """`llamafactory-cli train` runs torchrun itself with NPROC_PER_NODE processes (else one
    per visible device) and NNODES nodes (src/llamafactory/launcher.py:60-66)."""
    env = cmd.env
    data: dict[str, Any] = {}
    if "NPROC_PER_NODE" in env:
        data["NPROC_PER_NODE"] = env["NPROC_PER_NODE"]
    elif env.get("CUDA_VISIBLE_DEVICES", "").strip():
        data["CUDA_VISIBLE_DEVICES"] = len(env["CUDA_VISIBLE_DEVICES"].split(","))
    if "NNODES" in env:
        data["NNODES"] = env["NNODES"]
    if not data:
        return None
    r = Reading(Doc(name, data, {}, here), "LLaMA-Factory", kind="launcher")
    for key in ("NPROC_PER_NODE", "CUDA_VISIBLE_DEVICES"):
        gpus = r.doc.integer(key)
        if gpus is not None:
            r.set("gpus", gpus, key)
    nodes = r.doc.integer("NNODES")
    if nodes is not None and nodes != 1:
        r.set("nodes", nodes, "NNODES")
    return r.result()


def _launcher_plan(
    cmd: command_line.Command, cwd: Path | None, name: str = command_line.NAME
) -> ConfigPlan | None:
    opts = cmd.launcher_args
    if not cmd.launcher:
        return None
    here = (cwd or Path.cwd()) / "command"
    if cmd.launcher == "accelerate":
        data: dict[str, Any] = {}
        if "num_processes" in opts:
            data["num_processes"] = opts["num_processes"]
        if "num_machines" in opts:
            data["num_machines"] = opts["num_machines"]
        if "mixed_precision" in opts:
            data["mixed_precision"] = opts["mixed_precision"]
        kind = "DEEPSPEED" if opts.get("use_deepspeed") else "FSDP" if opts.get("use_fsdp") else ""
        ds_keys = ("zero_stage", "offload_optimizer_device", "offload_param_device")
        ds = {k: opts[k] for k in (*ds_keys, "deepspeed_config_file") if k in opts}
        if ds:
            kind = "DEEPSPEED"
            data["deepspeed_config"] = ds
        if kind:
            data["distributed_type"] = kind
        elif "num_processes" in data or opts.get("multi_gpu"):
            data["distributed_type"] = "MULTI_GPU"
        doc = Doc(name, data, {}, here, command=True)
        plan = accelerate.read(doc, read_named) if data else ConfigPlan(kind="launcher")
        config = opts.get("config_file")
        if isinstance(config, str):
            return fold(read_file(named_path(doc, "config_file", config)), plan)
        return plan
    r = Reading(Doc(name, opts, {}, here, command=True), cmd.launcher, kind="launcher")
    per_node_key = "nproc_per_node" if cmd.launcher == "torchrun" else "num_gpus"
    nodes_key = "nnodes" if cmd.launcher == "torchrun" else "num_nodes"
    per_node = r.doc.integer(per_node_key)
    nodes = r.doc.integer(nodes_key)
    if per_node is not None:
        r.set("gpus", per_node, per_node_key)  # gpus is per node; the plan checks its range
    if nodes is not None and nodes != 1:  # 0 and negatives too: the plan's check names them
        r.set("nodes", nodes, nodes_key)
    return r.result()


def fold(lower: ConfigPlan, upper: ConfigPlan) -> ConfigPlan:
    """``upper`` over ``lower`` (ConfigPlan.under), then what the two say together: a full
    fine-tune under FSDP whose training config says bf16 (a 16-bit model under the Trainer's
    autocast) while its accelerate config says mixed_precision bf16 runs accelerate's mixed
    precision (transformers/training_args.py:1614-1618 reads ACCELERATE_MIXED_PRECISION, its
    bf16/fp16 override it in the same dtype; accelerate/state.py:1014-1015
    set_mixed_precision): bf16-mixed, the recipe trainmem.core.recipes plans."""
    both = lower.under(upper)
    values = both.values
    precision = values.get("precision")
    mixed = f"{precision}-mixed"
    if (
        values.get("strategy") == "fsdp"
        and values.get("method") == "full"
        and precision in ("bf16", "fp16")
        and mixed in (lower.values.get("precision"), upper.values.get("precision"))
    ):
        other = lower if lower.values.get("precision") == mixed else upper
        origin = f"{both.origins['precision']} under FSDP with {other.origins['precision']}"
        return _with(both, "precision", mixed, origin)
    return both


def _with(plan: ConfigPlan, name: str, value: Any, origin: str) -> ConfigPlan:
    return replace(
        plan, values={**plan.values, name: value}, origins={**plan.origins, name: origin}
    )


def _deepspeed_casts(plan: ConfigPlan) -> ConfigPlan:
    """Under DeepSpeed the engine casts the model's parameters to bf16 / fp16 whenever
    either is enabled, as the Trainer's bf16 / fp16 make them ("auto"), and nothing
    autocasts (deepspeed runtime/engine.py _configure_distributed_model, edaa722; accelerate
    turns native AMP off for DistributedType.DEEPSPEED): an fp32 model under autocast
    (-mixed, a TRL model loaded in fp32) trains as the 16-bit one."""
    values = plan.values
    precision = str(values.get("precision", ""))
    if values.get("strategy") != "zero" or not precision.endswith("-mixed"):
        return plan
    why = "; DeepSpeed casts the parameters (runtime/engine.py _configure_distributed_model)"
    plan = _with(plan, "precision", precision[: -len("-mixed")], plan.origins["precision"] + why)
    if values.get("base_dtype") == "fp32":
        plan = _with(plan, "base_dtype", "16-bit", plan.origins["base_dtype"] + why)
    return plan


def read_configs(paths: Sequence[str | Path], commands: Sequence[str] = ()) -> ConfigPlan:
    """Every --from file then every --from-args command, folded in order."""
    plan = ConfigPlan(kind="launcher")
    for given in paths:
        if not str(given).strip():  # Path("") is ".", the current folder
            raise PlanError(FIELD, "an empty path names no file")
        try:
            path = files.expand(given)
        except files.FileReadError as exc:
            raise PlanError(FIELD, str(exc)) from None
        plan = fold(plan, read_file(path))
    for text in commands:
        plan = fold(plan, read_command(text))
    return _deepspeed_casts(plan)
