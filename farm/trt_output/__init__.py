"""Readers of what TensorRT and trtexec write, used by `farm ingest` and the TensorRT backends.

Named after Polygraphy's loaders, `<Target>From<Source>`: each reader is a function that takes
its source (a file's text, a log's lines, facts already read) and returns plain data. Helpers that
are not readers keep ordinary names (`fill_weights`, `join_layers`, `strip_prefix`, `rules_for`).

    engine_layers  EngineLayer, LayerFromLogLine, LayersFromLogText, LayersFromInspector,
                   fill_weights, join_layers, join_key: the one place for engine-layer logic
    json_files     ProfileFromProfileJson, TimesFromTimesJson, LayersFromInspectorJson,
                   EngineInfoFromInspectorJson; FormatError
    log            LogFacts, LogFactsFromTrtexecLog, LogRunsFromTrtexecLog
    versions       what each trtexec version (7.x to 11.x) printed and meant; strip_prefix
    timing         TimingFromLog, TimingFromTrtexecCommand, TIMING_FLAGS
    figures        MeasurementFromSummary, MeasurementFromTimes, SamplesFromTimes, BuildStatsFromLog,
                   DeviceRowFromLog: farm's records from what trtexec printed
    layer_records  LayerRecordsFromEngineLayers
    tuning_cache   TuningCacheFromJsonLines, TuningCache, TuningRoute: trtexec's --tuningCacheFile (11.1 on)

Imports only farm.records, farm.layers.memory and farm.measure (the statistics of `--exportTimes`
are computed as for farm's own runs): never ingest, the backends, the warehouse or the config.
"""

from farm.trt_output.engine_layers import (
    EngineLayer,
    LayerFromLogLine,
    LayersFromInspector,
    LayersFromLogText,
    Tensor,
    fill_weights,
    join_key,
    join_layers,
)
from farm.trt_output.figures import (
    BuildStatsFromLog,
    DeviceRowFromLog,
    MeasurementFromSummary,
    MeasurementFromTimes,
    SamplesFromTimes,
    implausible,
    summary_definition,
)
from farm.trt_output.json_files import (
    EngineInfo,
    EngineInfoFromInspectorJson,
    FormatError,
    IOTensor,
    LayersFromInspectorJson,
    Profile,
    ProfileFromProfileJson,
    ProfileRow,
    TimesFromTimesJson,
)
from farm.trt_output.layer_records import LayerRecords, LayerRecordsFromEngineLayers
from farm.trt_output.log import LogFacts, LogFactsFromTrtexecLog, LogRunsFromTrtexecLog
from farm.trt_output.timing import TIMING_DEFAULTS, TIMING_FLAGS, TimingFromLog, TimingFromTrtexecCommand, flag_table
from farm.trt_output.tuning_cache import TuningCache, TuningCacheFromJsonLines, TuningRoute
from farm.trt_output.versions import rules_for, strip_prefix, version_from_int

__all__ = ["BuildStatsFromLog", "implausible", "DeviceRowFromLog", "EngineInfo", "EngineInfoFromInspectorJson", "EngineLayer",
           "fill_weights", "flag_table", "FormatError", "IOTensor", "join_key", "join_layers", "LayerFromLogLine",
           "LayerRecords", "LayerRecordsFromEngineLayers", "LayersFromInspector", "LayersFromInspectorJson",
           "LayersFromLogText", "LogFacts", "LogFactsFromTrtexecLog", "LogRunsFromTrtexecLog",
           "MeasurementFromSummary", "MeasurementFromTimes", "Profile", "ProfileFromProfileJson", "ProfileRow",
           "rules_for", "SamplesFromTimes", "strip_prefix", "summary_definition", "Tensor", "TimesFromTimesJson",
           "TIMING_DEFAULTS", "TIMING_FLAGS", "TimingFromLog", "TimingFromTrtexecCommand", "TuningCache",
           "TuningCacheFromJsonLines", "TuningRoute", "version_from_int"]
