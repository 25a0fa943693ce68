"""Reverb's ``reverb.structured_writer`` module: configs, patterns, conditions, the writer.

``from ostinato import structured_writer as sw`` gives the names Reverb code uses
(``sw.Config``, ``sw.pattern_from_transform``, ``sw.create_config``, ``sw.Condition``,
``sw.infer_signature``, ...). Configs are plain Python objects, not protobuf messages; see
:mod:`ostinato.writers.patterns`, :mod:`ostinato.writers.pattern_validation` and
:mod:`ostinato.writers.structured_writer`.
"""

from ostinato.writers.pattern_validation import CompiledConfig, compile_configs, infer_signature
from ostinato.writers.patterns import (
    Condition,
    ConditionProto,
    Config,
    ConstantPriorityFn,
    ModuloEq,
    Pattern,
    PatternNode,
    PatternTransform,
    Priority,
    ReferenceStep,
    StructuredWriterConfig,
    TDError,
    constant_priority_fn,
    create_config,
    create_reference_step,
    pattern_from_transform,
    td_error,
    unpack_pattern,
)
from ostinato.writers.structured_writer import PatternEngine, StructuredWriter

__all__ = [
    "CompiledConfig",
    "Condition",
    "ConditionProto",
    "Config",
    "ConstantPriorityFn",
    "ModuloEq",
    "Pattern",
    "PatternEngine",
    "PatternNode",
    "PatternTransform",
    "Priority",
    "ReferenceStep",
    "StructuredWriter",
    "StructuredWriterConfig",
    "TDError",
    "compile_configs",
    "constant_priority_fn",
    "create_config",
    "create_reference_step",
    "infer_signature",
    "pattern_from_transform",
    "td_error",
    "unpack_pattern",
]
