"""Sample NVML (through `pynvml`, package nvidia-ml-py) into plain numbers in base units.

Only this module talks to NVML, so that the exporter and the tests see one narrow boundary. A call
that fails for one GPU (NVML answers Not Supported for many fields on some boards, or the GPU fell
off the bus) only drops that value for that GPU: a probe that dies on the first odd board would hide
the healthy ones, which is exactly when their numbers matter.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pynvml

log = logging.getLogger(__name__)

# NVML reports PCIe throughput in "KB/s"; NVIDIA's samples and tools treat that K as 1024.
PCIE_KIB = 1024
# GPM values are averages over the interval between two samples; shorter than this they are noise.
GPM_MIN_WINDOW_SECONDS = 1.0
# Metric key (the exported name less `rca_gpu_`) -> GPM metric id. All three are 0.0-100.0.
GPM_METRICS: dict[str, int] = {
    "gpm_sm_util_percent": pynvml.NVML_GPM_METRIC_SM_UTIL,
    "gpm_tensor_util_percent": pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL,
    "gpm_dram_bw_util_percent": pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL,
}


class NoGpuError(RuntimeError):
    """NVML cannot be used here (no library, no driver, no device); the message is NVML's reason."""


@dataclass(frozen=True)
class DeviceSample:
    """One GPU's values from one sampling round, keyed like `GPM_METRICS` (exported name less `rca_gpu_`)."""

    index: int
    uuid: str
    name: str
    values: dict[str, float]


@dataclass
class _Gpm:
    """Two NVML-allocated GPM samples per device: the previous one and the one being taken now."""

    previous: Any
    current: Any
    taken_at: float | None = None  # monotonic time of `previous`; None: no valid baseline yet


@dataclass
class _Device:
    index: int
    handle: Any
    uuid: str
    name: str
    gpm: _Gpm | None = None
    skipped: set[tuple[str, int]] = field(default_factory=set)  # (call, NVML error code) already logged


def _utilization(handle: Any) -> dict[str, float]:
    rates = pynvml.nvmlDeviceGetUtilizationRates(handle)  # percent of the last sample period
    return {"utilization_percent": rates.gpu, "memory_copy_utilization_percent": rates.memory}


def _memory(handle: Any) -> dict[str, float]:
    info = pynvml.nvmlDeviceGetMemoryInfo(handle)  # bytes
    return {"memory_used_bytes": info.used, "memory_free_bytes": info.free, "memory_total_bytes": info.total}


def _clocks_event_reasons(handle: Any) -> dict[str, float]:
    """Drivers from 535 call it ClocksEventReasons; older ones only have the deprecated Throttle name."""
    current = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
    if current is not None:
        try:
            return {"clocks_event_reasons": current(handle)}
        except pynvml.NVMLError_FunctionNotFound:
            pass
    return {"clocks_event_reasons": pynvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle)}


# (name used in logs, reader). Each reader is one NVML call, so one failure drops only its own values.
READERS: tuple[tuple[str, Callable[[Any], dict[str, float]]], ...] = (
    ("nvmlDeviceGetUtilizationRates", _utilization),
    ("nvmlDeviceGetMemoryInfo", _memory),
    ("nvmlDeviceGetClockInfo(SM)", lambda h: {"sm_clock_mhz": pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)}),
    (
        "nvmlDeviceGetClockInfo(MEM)",
        lambda h: {"memory_clock_mhz": pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM)},
    ),
    ("nvmlDeviceGetCurrentClocksEventReasons", _clocks_event_reasons),
    (
        "nvmlDeviceGetPcieThroughput(TX)",
        lambda h: {
            "pcie_tx_bytes_per_second": pynvml.nvmlDeviceGetPcieThroughput(h, pynvml.NVML_PCIE_UTIL_TX_BYTES) * PCIE_KIB
        },
    ),
    (
        "nvmlDeviceGetPcieThroughput(RX)",
        lambda h: {
            "pcie_rx_bytes_per_second": pynvml.nvmlDeviceGetPcieThroughput(h, pynvml.NVML_PCIE_UTIL_RX_BYTES) * PCIE_KIB
        },
    ),
    (
        "nvmlDeviceGetTemperature",
        lambda h: {"temperature_celsius": pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU)},
    ),
    ("nvmlDeviceGetPowerUsage", lambda h: {"power_watts": pynvml.nvmlDeviceGetPowerUsage(h) / 1000}),  # mW
)


class NvmlSampler:
    """Holds NVML open and takes one sample of every GPU per `sample()` call.

    GPM metrics are rates between two GPM snapshots, so the sampler keeps the previous snapshot per
    device and each `sample()` reports the window since the last call (at least `gpm_min_window`).
    """

    def __init__(self, gpm_min_window: float = GPM_MIN_WINDOW_SECONDS) -> None:
        self.gpm_min_window = gpm_min_window
        self.devices: list[_Device] = []
        self._open = False

    def __enter__(self) -> NvmlSampler:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def open(self) -> None:
        """Initialise NVML and find the GPUs; `NoGpuError` with NVML's reason when there are none."""
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            raise NoGpuError(str(exc)) from exc
        self._open = True
        try:
            count = pynvml.nvmlDeviceGetCount()
            last_error: pynvml.NVMLError | None = None
            for index in range(count):
                try:
                    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
                    device = _Device(index, handle, pynvml.nvmlDeviceGetUUID(handle), pynvml.nvmlDeviceGetName(handle))
                except pynvml.NVMLError as exc:
                    log.warning("GPU %d left out: NVML: %s", index, exc)
                    last_error = exc
                    continue
                device.gpm = self._open_gpm(device)
                self.devices.append(device)
        except pynvml.NVMLError as exc:
            self.close()
            raise NoGpuError(str(exc)) from exc
        if not self.devices:
            self.close()
            raise NoGpuError(
                f"none of {count} devices could be opened ({last_error})" if count else "NVML reports no devices"
            )
        log.info("NVML: %s", ", ".join(f"GPU {d.index} {d.name}{' (GPM)' if d.gpm else ''}" for d in self.devices))

    def _open_gpm(self, device: _Device) -> _Gpm | None:
        """GPM only where NVML says the device supports it (Hopper and newer); older drivers lack the call."""
        try:
            if not pynvml.nvmlGpmQueryDeviceSupport(device.handle).isSupportedDevice:
                return None
        except pynvml.NVMLError as exc:
            log.info("GPU %d: no GPM (%s)", device.index, exc)
            return None
        allocated: list[Any] = []
        try:
            allocated.append(pynvml.nvmlGpmSampleAlloc())
            allocated.append(pynvml.nvmlGpmSampleAlloc())
        except pynvml.NVMLError as exc:
            log.warning("GPU %d: GPM samples could not be allocated: %s", device.index, exc)
            for sample in allocated:
                _free(sample)
            return None
        gpm = _Gpm(previous=allocated[0], current=allocated[1])
        try:
            pynvml.nvmlGpmSampleGet(device.handle, gpm.previous)
            gpm.taken_at = time.monotonic()
        except pynvml.NVMLError as exc:
            self._skip(device, "nvmlGpmSampleGet", exc)
        return gpm

    def close(self) -> None:
        """Free the GPM samples and shut NVML down; safe to call twice."""
        if not self._open:
            return
        for device in self.devices:
            if device.gpm:
                _free(device.gpm.previous)
                _free(device.gpm.current)
                device.gpm = None
        self.devices = []
        self._open = False
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError as exc:
            log.warning("nvmlShutdown: %s", exc)

    def sample(self) -> list[DeviceSample]:
        """One round over every GPU; values a GPU could not give are absent from its `values`."""
        self._wait_for_gpm_window()
        out = []
        for device in self.devices:
            values: dict[str, float] = {}
            for call, read in READERS:
                try:
                    values.update(read(device.handle))
                except pynvml.NVMLError as exc:
                    self._skip(device, call, exc)
            if device.gpm:
                values.update(self._read_gpm(device, device.gpm))
            out.append(DeviceSample(device.index, device.uuid, device.name, {k: float(v) for k, v in values.items()}))
        return out

    def _wait_for_gpm_window(self) -> None:
        taken = [d.gpm.taken_at for d in self.devices if d.gpm and d.gpm.taken_at is not None]
        if taken:
            remaining = self.gpm_min_window - (time.monotonic() - max(taken))
            if remaining > 0:
                time.sleep(remaining)

    def _read_gpm(self, device: _Device, gpm: _Gpm) -> dict[str, float]:
        try:
            pynvml.nvmlGpmSampleGet(device.handle, gpm.current)
        except pynvml.NVMLError as exc:
            gpm.taken_at = None  # the next round starts a fresh window
            self._skip(device, "nvmlGpmSampleGet", exc)
            return {}
        now, had_baseline = time.monotonic(), gpm.taken_at is not None
        request = None
        try:
            if had_baseline:
                request = pynvml.c_nvmlGpmMetricsGet_t()
                request.version = pynvml.NVML_GPM_METRICS_GET_VERSION
                request.numMetrics = len(GPM_METRICS)
                request.sample1, request.sample2 = gpm.previous, gpm.current
                for i, metric_id in enumerate(GPM_METRICS.values()):
                    request.metrics[i].metricId = metric_id
                pynvml.nvmlGpmMetricsGet(request)
        except pynvml.NVMLError as exc:
            self._skip(device, "nvmlGpmMetricsGet", exc)
            request = None
        finally:  # the snapshot just taken is the next window's start, whatever happened to this one
            gpm.previous, gpm.current, gpm.taken_at = gpm.current, gpm.previous, now
        if request is None:
            return {}
        values = {}
        for i, key in enumerate(GPM_METRICS):
            metric = request.metrics[i]
            if metric.nvmlReturn == pynvml.NVML_SUCCESS:
                values[key] = metric.value
            else:
                self._skip(device, f"nvmlGpmMetricsGet({key})", pynvml.NVMLError(metric.nvmlReturn))
        return values

    @staticmethod
    def _skip(device: _Device, call: str, exc: pynvml.NVMLError) -> None:
        """Log a skipped value once per GPU, call and error, not on every round."""
        key = (call, getattr(exc, "value", -1))
        if key in device.skipped:
            return
        device.skipped.add(key)
        level = logging.INFO if isinstance(exc, pynvml.NVMLError_NotSupported) else logging.WARNING
        log.log(level, "GPU %d: %s skipped: %s", device.index, call, exc)


def _free(sample: Any) -> None:
    try:
        pynvml.nvmlGpmSampleFree(sample)
    except pynvml.NVMLError as exc:
        log.warning("nvmlGpmSampleFree: %s", exc)
