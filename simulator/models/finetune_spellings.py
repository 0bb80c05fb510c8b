"""The spellings of a fine-tuning, each read into one :class:`~.finetune.Finetune`.

* ``training.finetune`` (any strategy): ``mode`` (full, lora, qlora), ``rank``, ``alpha``,
  ``target_modules``, ``dropout``, ``freeze_embedding``, ``freeze_head``, ``freeze_layers``.
* Megatron-Bridge / NeMo (``strategy: megatron``): ``peft: lora`` with ``lora: {dim,
  alpha, dropout, target_modules}`` (``megatron.bridge.peft.lora.LoRA``'s fields; its
  default targets are ``linear_qkv, linear_proj, linear_fc1, linear_fc2``).
* Hugging Face PEFT (``strategy: fsdp``, ``ddp``, ``deepspeed``, ``torchtitan``, which all
  run models wrapped by ``peft.get_peft_model``): ``lora_config: {r, lora_alpha,
  lora_dropout, target_modules}`` (``peft.LoraConfig``'s fields), and for QLoRA
  ``load_in_4bit: true`` (transformers' ``BitsAndBytesConfig``, ``bnb_4bit_quant_type: nf4``).

Target modules in any of the spellings: Hugging Face Llama names (``q_proj``, ``k_proj``,
``v_proj``, ``o_proj``, ``gate_proj``, ``up_proj``, ``down_proj``, ``all-linear``), Megatron
names (``linear_qkv``, ``linear_proj``, ``linear_fc1``, ``linear_fc2``), NeMo 1's
(``attention_qkv``, ``attention_dense``, ``mlp_fc1``, ``mlp_fc2``, ``attention``, ``mlp``,
``all``) and the internal ones (:data:`~.finetune.TARGETS`).
"""

from __future__ import annotations

from typing import Any

from simulator.errors import ConfigError
from simulator.models.finetune import TARGETS, Finetune

_HF_ALL = ("q", "k", "v", "o", "gate", "up", "down")
TARGET_SPELLINGS: dict[str, tuple[str, ...]] = {
    **{t: (t,) for t in TARGETS},
    "q_proj": ("q",), "k_proj": ("k",), "v_proj": ("v",), "o_proj": ("o",),
    "gate_proj": ("gate",), "up_proj": ("up",), "down_proj": ("down",), "all-linear": _HF_ALL,
    "linear_qkv": ("qkv",), "linear_proj": ("o",), "linear_fc1": ("fc1",),
    "linear_fc2": ("down",),
    "attention_qkv": ("qkv",), "attention_dense": ("o",), "mlp_fc1": ("fc1",),
    "mlp_fc2": ("down",), "attention": ("qkv", "o"), "mlp": ("fc1", "down"),
    "all": ("qkv", "o", "fc1", "down"),
}
MEGATRON_DEFAULT_TARGETS = ("linear_qkv", "linear_proj", "linear_fc1", "linear_fc2")
FINETUNE_KEYS = ("peft", "lora", "lora_config", "load_in_4bit")   # read here, not by strategies
HF_STRATEGIES = ("fsdp", "ddp", "deepspeed", "torchtitan")
_SECTION_KEYS = ("mode", "rank", "alpha", "target_modules", "dropout", "freeze_embedding",
                 "freeze_head", "freeze_layers", "base_precision")


def targets(names: Any, swiglu: bool, field: str) -> tuple[str, ...]:
    """Internal target names of ``names`` (a list, or one string): Megatron's ``fc1`` is the
    fused gate/up projection of a SwiGLU MLP, the up projection of a GELU one."""
    if isinstance(names, str):
        names = [names]
    if not isinstance(names, (list, tuple)) or not names:
        raise ConfigError("must be a non-empty list of module names", field=field)
    out: set[str] = set()
    for name in names:
        if not isinstance(name, str) or name not in TARGET_SPELLINGS:
            raise ConfigError(f"unknown module {name!r}; valid: {', '.join(TARGET_SPELLINGS)}",
                              field=field)
        out.update(("gate_up" if swiglu else "up") if t == "fc1" else t
                   for t in TARGET_SPELLINGS[name])
    return tuple(sorted(out))


def _number(data: dict, key: str, kind, default, field: str):
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, kind):
        what = "an integer" if kind is int else "a number"
        raise ConfigError(f"must be {what}, got {value!r}", field=f"{field}.{key}")
    return value


def _unknown(data: dict, known, field: str) -> None:
    for key in data:
        if key not in known:
            raise ConfigError(f"unknown key {key!r}; valid: {', '.join(known)}",
                              field=f"{field}.{key}")


def from_section(data: dict, swiglu: bool, field: str = "training.finetune") -> Finetune:
    """``training.finetune``'s mapping (see the module doc)."""
    if not isinstance(data, dict):
        raise ConfigError("must be a mapping", field=field)
    _unknown(data, _SECTION_KEYS, field)
    mode = data.get("mode", "lora")
    adapters = mode != "full"
    names = data.get("target_modules")
    flags = {k: data.get(k, False) for k in ("freeze_embedding", "freeze_head")}
    for key, value in flags.items():
        if not isinstance(value, bool):
            raise ConfigError(f"must be true or false, got {value!r}", field=f"{field}.{key}")
    values = dict(
        mode=mode, rank=_number(data, "rank", int, 16 if adapters else 0, field),
        alpha=float(_number(data, "alpha", (int, float), 32 if adapters else 0, field)),
        targets=targets(names, swiglu, f"{field}.target_modules") if names is not None
        else (("qkv", "o") if adapters else ()),
        dropout=float(_number(data, "dropout", (int, float), 0.0, field)),
        freeze_layers=_number(data, "freeze_layers", int, 0, field),
        base_precision=data.get("base_precision", "bf16"), **flags)
    try:
        return Finetune(**values)
    except ConfigError as exc:     # Finetune's own fields, as this mapping spells them
        if not (exc.field or "").startswith("finetune."):
            raise
        raise ConfigError(exc.reason, field=field + exc.field.removeprefix("finetune")) \
            from None


def from_megatron(strategy: dict, swiglu: bool) -> Finetune | None:
    """``peft: lora`` with its ``lora`` mapping (Megatron-Bridge's ``LoRA`` fields), popped
    from ``strategy``; None when it has no ``peft``."""
    peft = strategy.pop("peft", None)
    lora = strategy.pop("lora", None)
    if peft is None:
        if lora is not None:
            raise ConfigError("lora settings without peft: lora", field="strategy.lora")
        return None
    if peft != "lora":
        raise ConfigError(f"must be lora, got {peft!r}", field="strategy.peft")
    lora = {} if lora is None else lora
    if not isinstance(lora, dict):
        raise ConfigError("must be a mapping", field="strategy.lora")
    field = "strategy.lora"
    _unknown(lora, ("dim", "alpha", "dropout", "target_modules"), field)
    return Finetune(mode="lora", rank=_number(lora, "dim", int, 32, field),
                    alpha=float(_number(lora, "alpha", (int, float), 32, field)),
                    targets=targets(lora.get("target_modules", MEGATRON_DEFAULT_TARGETS),
                                    swiglu, f"{field}.target_modules"),
                    dropout=float(_number(lora, "dropout", (int, float), 0.0, field)))


def from_hf_peft(strategy: dict, swiglu: bool) -> Finetune | None:
    """``lora_config`` (``peft.LoraConfig``'s fields) and ``load_in_4bit``, popped from
    ``strategy``; None when it has neither."""
    lora = strategy.pop("lora_config", None)
    four_bit = strategy.pop("load_in_4bit", None)
    if lora is None:
        if four_bit is not None:
            raise ConfigError("a 4-bit base without lora_config trains nothing (QLoRA is "
                              "load_in_4bit with lora_config)", field="strategy.load_in_4bit")
        return None
    field = "strategy.lora_config"
    if not isinstance(lora, dict):
        raise ConfigError("must be a mapping", field=field)
    if four_bit is not None and not isinstance(four_bit, bool):
        raise ConfigError(f"must be true or false, got {four_bit!r}",
                          field="strategy.load_in_4bit")
    _unknown(lora, ("r", "lora_alpha", "lora_dropout", "target_modules"), field)
    if "target_modules" not in lora:
        raise ConfigError("LoraConfig needs target_modules (PEFT's default depends on the "
                          "model class)", field=f"{field}.target_modules")
    return Finetune(mode="qlora" if four_bit else "lora",
                    rank=_number(lora, "r", int, 8, field),
                    alpha=float(_number(lora, "lora_alpha", (int, float), 8, field)),
                    targets=targets(lora["target_modules"], swiglu, f"{field}.target_modules"),
                    dropout=float(_number(lora, "lora_dropout", (int, float), 0.0, field)))


def resolve(section: dict | None, strategy: dict, swiglu: bool) -> Finetune | None:
    """The one fine-tuning a scenario describes, from ``training.finetune`` or the
    strategy's own spelling (popped from ``strategy``); ConfigError when both say it, or
    a strategy spells another framework's."""
    name = strategy.get("name")
    spelled = None
    if "peft" in strategy or "lora" in strategy:
        if name != "megatron":
            raise ConfigError(f"peft/lora is Megatron-Bridge's spelling; {name} takes "
                              f"training.finetune (or lora_config)", field="strategy.peft")
        spelled = from_megatron(strategy, swiglu)
    if "lora_config" in strategy or "load_in_4bit" in strategy:
        if name not in HF_STRATEGIES:
            raise ConfigError(f"lora_config is Hugging Face PEFT's spelling; {name} takes "
                              f"training.finetune (or peft: lora)",
                              field="strategy.lora_config")
        spelled = from_hf_peft(strategy, swiglu)
    if section is not None and spelled is not None:
        raise ConfigError("fine-tuning set twice (training.finetune and the strategy's "
                          "spelling): set one", field="training.finetune")
    if section is not None:
        return from_section(section, swiglu)
    return spelled
