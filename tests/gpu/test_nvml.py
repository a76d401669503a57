"""`rca gpu-probe` against a fake NVML: only the `pynvml` functions are replaced, nothing of ours.

The fake keeps NVML's contract: ctypes handles and result structs, bytes for memory, KB/s for PCIe,
MHz, milliwatts, bitmask ints, errors raised as `pynvml.NVMLError(code)` (which pynvml maps to its
subclass), calls before `nvmlInit` failing with Uninitialized, and GPM needing two samples of the
same device taken in order. Any real NVML call that slips past it fails the test loudly.
"""

from __future__ import annotations

import ctypes
import io
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pynvml
import pytest
from prometheus_client.parser import text_string_to_metric_families

from rca import cli
from rca.gpu.exporter import GpuProbe, render
from rca.gpu.nvml import NvmlSampler
from tests.e2e.promstack import free_port
from tests.helpers.paths import REPO
from tests.helpers.processes import stop_process, subprocess_env

GIB = 1024**3
HOST = socket.gethostname()
NOT_SUPPORTED = pynvml.NVML_ERROR_NOT_SUPPORTED
GPM_IDS = {
    "sm": pynvml.NVML_GPM_METRIC_SM_UTIL,
    "tensor": pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL,
    "dram": pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL,
}


@dataclass
class FakeGpu:
    name: str
    uuid: str
    util_gpu: int
    util_memory: int
    memory_total: int  # bytes
    memory_used: int  # bytes
    sm_clock_mhz: int
    memory_clock_mhz: int
    event_reasons: int  # bitmask
    pcie_tx_kbs: int  # KB/s, as NVML reports it
    pcie_rx_kbs: int
    temperature_c: int
    power_mw: int
    gpm: dict[int, float] | None = None  # GPM metric id -> value; None: not a GPM device
    not_supported: set[str] = field(default_factory=set)  # NVML functions answering Not Supported
    lost: bool = False  # every call answers GPU is lost


def hopper() -> FakeGpu:
    return FakeGpu(
        "NVIDIA H100 80GB HBM3",
        "GPU-5f1c2a3b-0d4e-4f60-8a71-9b8c7d6e5f40",
        87,
        41,
        80 * GIB,
        61 * GIB,
        1980,
        2619,
        0x4 | 0x20,
        1500,
        250_000,
        64,
        612_345,
        gpm={GPM_IDS["sm"]: 73.5, GPM_IDS["tensor"]: 48.25, GPM_IDS["dram"]: 35.0},
    )


def ampere() -> FakeGpu:
    return FakeGpu(
        "NVIDIA A100-SXM4-80GB",
        "GPU-0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9",
        55,
        20,
        80 * GIB,
        12 * GIB,
        1410,
        1593,
        0x1,
        800,
        3000,
        51,
        250_000,
    )


def fail(code: int) -> pynvml.NVMLError:
    """What pynvml's _nvmlCheckReturn raises for a return code."""
    return pynvml.NVMLError(code)


class FakeNvml:
    """The slice of NVML the probe uses, behaving as the NVML API reference documents it."""

    def __init__(self, gpus: list[FakeGpu], init_error: int | None = None, old_driver: bool = False) -> None:
        self.gpus, self.init_error, self.old_driver = gpus, init_error, old_driver
        self.refcount = 0
        self.calls: list[tuple[str, int | None]] = []
        self._buffers: list[Any] = []  # keep the memory behind fake handles and samples alive
        self._handles: dict[int, int] = {}  # handle address -> gpu index
        self.samples: dict[int, tuple[int, int] | None] = {}  # sample address -> (gpu index, sequence) once taken
        self._sequence = 0

    # ------------------------------------------------------------------ helpers
    def _pointer(self, ctype: Any) -> Any:
        buffer = ctypes.create_string_buffer(16)
        self._buffers.append(buffer)
        return ctypes.cast(buffer, ctype)

    @staticmethod
    def _address(pointer: Any) -> int:
        return ctypes.cast(pointer, ctypes.c_void_p).value

    def _initialised(self) -> None:
        if self.refcount == 0:
            raise fail(pynvml.NVML_ERROR_UNINITIALIZED)

    def _gpu(self, function: str, handle: Any) -> FakeGpu:
        self._initialised()
        index = self._handles.get(self._address(handle))
        if index is None:
            raise fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        self.calls.append((function, index))
        gpu = self.gpus[index]
        if gpu.lost:
            raise fail(pynvml.NVML_ERROR_GPU_IS_LOST)
        if function in gpu.not_supported:
            raise fail(NOT_SUPPORTED)
        return gpu

    # ------------------------------------------------------------------ NVML
    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise fail(self.init_error)
        self.refcount += 1

    def nvmlShutdown(self) -> None:
        self._initialised()
        self.refcount -= 1

    def nvmlDeviceGetCount(self) -> int:
        self._initialised()
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
        self._initialised()
        if not 0 <= index < len(self.gpus):
            raise fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        handle = self._pointer(pynvml.c_nvmlDevice_t)
        self._handles[self._address(handle)] = index
        return handle

    def nvmlDeviceGetName(self, handle: Any) -> str:
        return self._gpu("nvmlDeviceGetName", handle).name  # pynvml decodes the C string

    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        return self._gpu("nvmlDeviceGetUUID", handle).uuid

    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Any:
        gpu = self._gpu("nvmlDeviceGetUtilizationRates", handle)
        return pynvml.c_nvmlUtilization_t(gpu=gpu.util_gpu, memory=gpu.util_memory)

    def nvmlDeviceGetMemoryInfo(self, handle: Any, version: int | None = None) -> Any:
        gpu = self._gpu("nvmlDeviceGetMemoryInfo", handle)
        return pynvml.c_nvmlMemory_t(
            total=gpu.memory_total, free=gpu.memory_total - gpu.memory_used, used=gpu.memory_used
        )

    def nvmlDeviceGetClockInfo(self, handle: Any, clock_type: int) -> int:
        gpu = self._gpu("nvmlDeviceGetClockInfo", handle)
        clocks = {pynvml.NVML_CLOCK_SM: gpu.sm_clock_mhz, pynvml.NVML_CLOCK_MEM: gpu.memory_clock_mhz}
        if clock_type not in clocks:
            raise fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return clocks[clock_type]

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Any) -> int:
        self._initialised()
        if self.old_driver:  # the symbol is missing from libnvidia-ml before 535
            raise fail(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        return self._gpu("nvmlDeviceGetCurrentClocksEventReasons", handle).event_reasons

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: Any) -> int:
        return self._gpu("nvmlDeviceGetCurrentClocksThrottleReasons", handle).event_reasons

    def nvmlDeviceGetPcieThroughput(self, handle: Any, counter: int) -> int:
        gpu = self._gpu("nvmlDeviceGetPcieThroughput", handle)
        values = {pynvml.NVML_PCIE_UTIL_TX_BYTES: gpu.pcie_tx_kbs, pynvml.NVML_PCIE_UTIL_RX_BYTES: gpu.pcie_rx_kbs}
        if counter not in values:
            raise fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return values[counter]

    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int:
        gpu = self._gpu("nvmlDeviceGetTemperature", handle)
        if sensor != pynvml.NVML_TEMPERATURE_GPU:
            raise fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return gpu.temperature_c

    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int:
        return self._gpu("nvmlDeviceGetPowerUsage", handle).power_mw

    def nvmlGpmQueryDeviceSupport(self, handle: Any) -> Any:
        gpu = self._gpu("nvmlGpmQueryDeviceSupport", handle)
        return pynvml.c_nvmlGpmSupport_t(
            version=pynvml.NVML_GPM_SUPPORT_VERSION, isSupportedDevice=int(gpu.gpm is not None)
        )

    def nvmlGpmSampleAlloc(self) -> Any:
        self._initialised()
        sample = self._pointer(pynvml.c_nvmlGpmSample_t)
        self.samples[self._address(sample)] = None
        return sample

    def nvmlGpmSampleFree(self, sample: Any) -> None:
        self._initialised()
        if self.samples.pop(self._address(sample), "missing") == "missing":
            raise fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)

    def nvmlGpmSampleGet(self, handle: Any, sample: Any) -> Any:
        gpu = self._gpu("nvmlGpmSampleGet", handle)
        if gpu.gpm is None:
            raise fail(NOT_SUPPORTED)
        address = self._address(sample)
        if address not in self.samples:
            raise fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        self._sequence += 1
        self.samples[address] = (self.gpus.index(gpu), self._sequence)
        return sample

    def nvmlGpmMetricsGet(self, request: Any) -> Any:
        self._initialised()
        if request.version != pynvml.NVML_GPM_METRICS_GET_VERSION:
            raise fail(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        first = self.samples.get(self._address(request.sample1))
        second = self.samples.get(self._address(request.sample2))
        # Both taken, on one device, the second after the first.
        if first is None or second is None or first[0] != second[0] or first[1] >= second[1]:
            raise fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        gpu = self.gpus[first[0]]
        self.calls.append(("nvmlGpmMetricsGet", first[0]))
        for i in range(request.numMetrics):
            metric = request.metrics[i]
            if gpu.gpm is not None and metric.metricId in gpu.gpm:
                metric.value, metric.nvmlReturn = gpu.gpm[metric.metricId], pynvml.NVML_SUCCESS
            else:
                metric.nvmlReturn = NOT_SUPPORTED
        return request

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        for name in dir(self):
            if name.startswith("nvml"):
                monkeypatch.setattr(pynvml, name, getattr(self, name))

        def real_nvml(name: str) -> None:
            raise AssertionError(f"the probe reached real NVML ({name}) past the fake")

        monkeypatch.setattr(pynvml, "_nvmlGetFunctionPointer", real_nvml)


@pytest.fixture
def nvml(monkeypatch: pytest.MonkeyPatch) -> FakeNvml:
    fake = FakeNvml([hopper(), ampere()])
    fake.install(monkeypatch)
    return fake


@pytest.fixture
def sampler(nvml: FakeNvml) -> Iterator[NvmlSampler]:
    with NvmlSampler(gpm_min_window=0) as opened:
        yield opened
    assert nvml.refcount == 0 and not nvml.samples, "NVML left open or GPM samples not freed"


def series(text: str) -> dict[tuple[str, str], tuple[dict[str, str], float]]:
    """(metric name, gpu index) -> (labels, value), from Prometheus text."""
    out = {}
    for family in text_string_to_metric_families(text):
        assert family.type == "gauge"
        for sample in family.samples:
            out[(sample.name, sample.labels.get("gpu", ""))] = (sample.labels, sample.value)
    return out


def test_both_gpus_exported_with_dcgm_labels_and_base_units(sampler: NvmlSampler) -> None:
    got = series(render(sampler.sample()))
    h100, a100 = hopper(), ampere()
    for index, gpu in (("0", h100), ("1", a100)):
        labels, _ = got[("rca_gpu_utilization_percent", index)]
        assert labels == {"gpu": index, "UUID": gpu.uuid, "modelName": gpu.name, "Hostname": HOST}
        expected = {
            "rca_gpu_utilization_percent": gpu.util_gpu,
            "rca_gpu_memory_copy_utilization_percent": gpu.util_memory,
            "rca_gpu_memory_used_bytes": gpu.memory_used,  # bytes, not MiB
            "rca_gpu_memory_free_bytes": gpu.memory_total - gpu.memory_used,
            "rca_gpu_memory_total_bytes": gpu.memory_total,
            "rca_gpu_sm_clock_mhz": gpu.sm_clock_mhz,
            "rca_gpu_memory_clock_mhz": gpu.memory_clock_mhz,
            "rca_gpu_clocks_event_reasons": gpu.event_reasons,
            "rca_gpu_pcie_tx_bytes_per_second": gpu.pcie_tx_kbs * 1024,  # KB/s -> bytes/s
            "rca_gpu_pcie_rx_bytes_per_second": gpu.pcie_rx_kbs * 1024,
            "rca_gpu_temperature_celsius": gpu.temperature_c,
            "rca_gpu_power_watts": gpu.power_mw / 1000,  # mW -> W
        }
        assert {name: got[(name, index)][1] for name in expected} == expected
    assert got[("rca_gpu_memory_used_bytes", "0")][1] == 61 * GIB
    assert got[("rca_gpu_clocks_event_reasons", "0")][1] == 0x24
    assert got[("rca_gpu_probe_last_sample_timestamp_seconds", "")][1] == pytest.approx(time.time(), abs=60)


def test_gpm_metrics_only_for_the_hopper(sampler: NvmlSampler, nvml: FakeNvml) -> None:
    got = series(render(sampler.sample()))
    assert got[("rca_gpu_gpm_sm_util_percent", "0")][1] == 73.5
    assert got[("rca_gpu_gpm_tensor_util_percent", "0")][1] == 48.25
    assert got[("rca_gpu_gpm_dram_bw_util_percent", "0")][1] == 35.0
    assert not [key for key in got if key[0].startswith("rca_gpu_gpm_") and key[1] == "1"]
    # The Ampere was asked whether it supports GPM and never sampled.
    assert ("nvmlGpmQueryDeviceSupport", 1) in nvml.calls
    assert ("nvmlGpmSampleGet", 1) not in nvml.calls
    # A second round measures the window since the first one.
    assert series(render(sampler.sample()))[("rca_gpu_gpm_sm_util_percent", "0")][1] == 73.5
    assert nvml.calls.count(("nvmlGpmMetricsGet", 0)) == 2


def test_not_supported_fields_are_skipped_for_that_gpu_only(monkeypatch: pytest.MonkeyPatch) -> None:
    a100 = ampere()
    a100.not_supported = {"nvmlDeviceGetPowerUsage", "nvmlDeviceGetPcieThroughput"}
    h100 = hopper()
    del h100.gpm[GPM_IDS["tensor"]]  # one GPM metric answers Not Supported in its own nvmlReturn
    fake = FakeNvml([h100, a100])
    fake.install(monkeypatch)
    with NvmlSampler(gpm_min_window=0) as sampler:
        got = series(render(sampler.sample()))
    for name in ("rca_gpu_power_watts", "rca_gpu_pcie_tx_bytes_per_second", "rca_gpu_pcie_rx_bytes_per_second"):
        assert (name, "1") not in got
        assert (name, "0") in got
    assert got[("rca_gpu_sm_clock_mhz", "1")][1] == 1410
    assert got[("rca_gpu_memory_used_bytes", "1")][1] == 12 * GIB
    assert ("rca_gpu_gpm_tensor_util_percent", "0") not in got
    assert got[("rca_gpu_gpm_sm_util_percent", "0")][1] == 73.5
    assert got[("rca_gpu_gpm_dram_bw_util_percent", "0")][1] == 35.0


def test_a_lost_gpu_drops_out_and_the_other_keeps_reporting(sampler: NvmlSampler, nvml: FakeNvml) -> None:
    sampler.sample()
    nvml.gpus[0].lost = True
    got = series(render(sampler.sample()))
    assert not [key for key in got if key[1] == "0"]
    assert got[("rca_gpu_utilization_percent", "1")][1] == 55
    nvml.gpus[0].lost = False  # back on the bus: GPM restarts from a fresh baseline
    sampler.sample()
    assert series(render(sampler.sample()))[("rca_gpu_gpm_sm_util_percent", "0")][1] == 73.5


def test_old_driver_falls_back_to_throttle_reasons(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeNvml([ampere()], old_driver=True)
    fake.install(monkeypatch)
    with NvmlSampler(gpm_min_window=0) as sampler:
        got = series(render(sampler.sample()))
    assert got[("rca_gpu_clocks_event_reasons", "0")][1] == 0x1
    assert ("nvmlDeviceGetCurrentClocksThrottleReasons", 0) in fake.calls


def test_once_prints_parseable_prometheus_text(nvml: FakeNvml, capsys: pytest.CaptureFixture[str]) -> None:
    cli.main(["gpu-probe", "--once"])
    out = capsys.readouterr().out
    families = {f.name: f for f in text_string_to_metric_families(out)}
    assert all(name.startswith("rca_gpu_") for name in families)
    assert {
        "rca_gpu_utilization_percent",
        "rca_gpu_memory_used_bytes",
        "rca_gpu_sm_clock_mhz",
        "rca_gpu_clocks_event_reasons",
        "rca_gpu_pcie_tx_bytes_per_second",
        "rca_gpu_gpm_sm_util_percent",
        "rca_gpu_gpm_tensor_util_percent",
        "rca_gpu_gpm_dram_bw_util_percent",
    } <= set(families)
    assert {s.labels["gpu"] for s in families["rca_gpu_utilization_percent"].samples} == {"0", "1"}
    assert nvml.refcount == 0 and not nvml.samples


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        (pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, "NVML Shared Library Not Found"),
        (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, "Driver Not Loaded"),
    ],
)
@pytest.mark.parametrize("argv", [["gpu-probe", "--once"], ["gpu-probe", "--port", "0"]])
def test_no_gpu_exits_3_with_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], code: int, reason: str, argv: list[str]
) -> None:
    FakeNvml([], init_error=code).install(monkeypatch)
    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv)
    assert exit_info.value.code == 3
    captured = capsys.readouterr()
    assert captured.err == f"error: no NVIDIA GPU available: {reason}\n"
    assert captured.out == ""


class ClosedPipe(io.StringIO):
    """Standard output whose reader went away (`rca gpu-probe --once | head -1`)."""

    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")


def test_once_into_a_closed_pipe_says_so_in_one_line(
    nvml: FakeNvml, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "stdout", ClosedPipe())
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["gpu-probe", "--once"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == "error: cannot write the sample: Broken pipe\n"
    assert nvml.refcount == 0


def test_driver_loaded_but_no_devices_exits_3(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    FakeNvml([]).install(monkeypatch)
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["gpu-probe", "--once"])
    assert exit_info.value.code == 3
    assert capsys.readouterr().err == "error: no NVIDIA GPU available: NVML reports no devices\n"


def test_real_cli_on_this_machine() -> None:
    """No fake: where NVML cannot start (every machine here) the real CLI says why and exits 3."""
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        reason = str(exc)
    else:  # a GPU host: the same command must then produce real metrics
        pynvml.nvmlShutdown()
        reason = None
    run = subprocess.run(
        [sys.executable, "-c", "from rca.cli import main; main()", "gpu-probe", "--once"],
        capture_output=True,
        text=True,
        timeout=120,
        env=subprocess_env(),
    )
    if reason is None:
        assert run.returncode == 0, run.stderr
        assert "rca_gpu_utilization_percent" in {f.name for f in text_string_to_metric_families(run.stdout)}
    else:
        assert run.returncode == 3
        assert run.stderr == f"error: no NVIDIA GPU available: {reason}\n"
        assert run.stdout == ""


def test_http_server_serves_metrics_and_shuts_down(sampler: NvmlSampler) -> None:
    probe = GpuProbe(sampler, host="127.0.0.1", port=0, interval=0.05)
    probe.start()
    try:
        url = f"http://127.0.0.1:{probe.port}/metrics"
        reply = httpx.get(url, timeout=5)
        assert reply.status_code == 200
        first = series(reply.text)
        assert first[("rca_gpu_memory_total_bytes", "1")][1] == 80 * GIB
        assert first[("rca_gpu_gpm_dram_bw_util_percent", "0")][1] == 35.0
        stamp = first[("rca_gpu_probe_last_sample_timestamp_seconds", "")][1]
        deadline = time.monotonic() + 10  # the sampler thread keeps refreshing on its own
        while series(httpx.get(url, timeout=5).text)[("rca_gpu_probe_last_sample_timestamp_seconds", "")][1] == stamp:
            assert time.monotonic() < deadline, "no new sampling round within 10 s"
            time.sleep(0.05)
    finally:
        probe.stop()
    assert probe._sampling is not None and not probe._sampling.is_alive()
    with pytest.raises(httpx.ConnectError):
        httpx.get(url, timeout=2)


# Runs `rca gpu-probe` in a child process with the same fake installed, then reports whether it closed NVML.
SERVE_WITH_FAKE = """
import sys
import pytest
from tests.gpu.test_nvml import FakeNvml, ampere, hopper
fake = FakeNvml([hopper(), ampere()])
fake.install(pytest.MonkeyPatch())
from rca.cli import main
try:
    main(sys.argv[1:])
finally:
    print(f"nvml refcount={fake.refcount} gpm samples={len(fake.samples)}", file=sys.stderr)
"""


def test_cli_serves_until_sigterm_then_closes_nvml() -> None:
    port = free_port()
    child = subprocess.Popen(
        [sys.executable, "-c", SERVE_WITH_FAKE, "gpu-probe", "--port", str(port), "--interval", "0.2"],
        cwd=REPO,
        env=subprocess_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            assert child.poll() is None, child.communicate()[1]
            try:
                reply = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "gpu-probe did not listen within 30 s"
                time.sleep(0.1)
        assert reply.status_code == 200
        assert series(reply.text)[("rca_gpu_gpm_sm_util_percent", "0")][1] == 73.5
        child.send_signal(signal.SIGTERM)
        _, err = child.communicate(timeout=30)
    finally:
        stop_process(child)
    assert child.returncode == 0, err
    assert "nvml refcount=0 gpm samples=0" in err
