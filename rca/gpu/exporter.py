"""Serve `NvmlSampler` rounds as Prometheus metrics named `rca_gpu_*` with DCGM-exporter labels.

The labels (gpu, UUID, modelName, Hostname) are dcgm-exporter's, so that these series join DCGM's
on the same GPU with `on(UUID)` or `on(Hostname, gpu)`.
"""

from __future__ import annotations

import logging
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import TextIO
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, generate_latest, start_http_server
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from rca.gpu.nvml import DeviceSample, NvmlSampler

log = logging.getLogger(__name__)

LABELS = ("gpu", "UUID", "modelName", "Hostname")
PREFIX = "rca_gpu_"
# Sample key -> help text; the exported name is PREFIX + key. Order is exposition order.
METRICS: dict[str, str] = {
    "utilization_percent": "Percent of the last sample period a kernel ran on the GPU "
    "(nvmlDeviceGetUtilizationRates.gpu).",
    "memory_copy_utilization_percent": "Percent of the last sample period device memory was read or written "
    "(nvmlDeviceGetUtilizationRates.memory).",
    "memory_used_bytes": "Device memory used, bytes (nvmlDeviceGetMemoryInfo.used).",
    "memory_free_bytes": "Device memory free, bytes (nvmlDeviceGetMemoryInfo.free).",
    "memory_total_bytes": "Device memory installed, bytes (nvmlDeviceGetMemoryInfo.total).",
    "sm_clock_mhz": "Current SM clock, MHz (nvmlDeviceGetClockInfo NVML_CLOCK_SM).",
    "memory_clock_mhz": "Current memory clock, MHz (nvmlDeviceGetClockInfo NVML_CLOCK_MEM).",
    "clocks_event_reasons": "Bitmask of why the clocks are below maximum (nvmlDeviceGetCurrentClocksEventReasons): "
    "0x1 idle, 0x2 application clocks, 0x4 SW power cap, 0x8 HW slowdown, 0x10 sync boost, "
    "0x20 SW thermal, 0x40 HW thermal, 0x80 HW power brake.",
    "pcie_tx_bytes_per_second": "PCIe bytes per second sent by the GPU over a 20 ms window "
    "(nvmlDeviceGetPcieThroughput TX, KB/s x 1024).",
    "pcie_rx_bytes_per_second": "PCIe bytes per second received by the GPU over a 20 ms window "
    "(nvmlDeviceGetPcieThroughput RX, KB/s x 1024).",
    "temperature_celsius": "GPU die temperature, degrees Celsius (nvmlDeviceGetTemperature NVML_TEMPERATURE_GPU).",
    "power_watts": "Power draw, watts (nvmlDeviceGetPowerUsage, milliwatts / 1000).",
    "gpm_sm_util_percent": "GPM: percent of SMs busy over the probe interval, 0-100 (NVML_GPM_METRIC_SM_UTIL).",
    "gpm_tensor_util_percent": "GPM: percent of time SMs ran any tensor operation over the probe interval, 0-100 "
    "(NVML_GPM_METRIC_ANY_TENSOR_UTIL).",
    "gpm_dram_bw_util_percent": "GPM: DRAM bandwidth used as a percent of the theoretical maximum over the "
    "probe interval, 0-100 (NVML_GPM_METRIC_DRAM_BW_UTIL).",
}
DEFAULT_HOST, DEFAULT_PORT, DEFAULT_INTERVAL = "127.0.0.1", 9835, 5.0


class SnapshotCollector(Collector):
    """Exposes the latest sampling round; scrapes never call NVML themselves.

    GPM values are rates over the window between two samples, so a scrape must not define that
    window (two Prometheus replicas scraping would each see half of it), and a slow NVML call must
    not make a scrape time out.
    """

    def __init__(self, hostname: str | None = None) -> None:
        self.hostname = hostname or socket.gethostname()
        self._round: tuple[float, list[DeviceSample]] | None = None

    def update(self, samples: list[DeviceSample], taken_at: float | None = None) -> None:
        self._round = (time.time() if taken_at is None else taken_at, samples)  # one reference swap: no lock needed

    def collect(self) -> Iterator[Metric]:
        current = self._round
        if current is None:
            return
        taken_at, samples = current
        families = {key: GaugeMetricFamily(PREFIX + key, doc, labels=LABELS) for key, doc in METRICS.items()}
        for sample in samples:
            labels = [str(sample.index), sample.uuid, sample.name, self.hostname]
            for key, value in sample.values.items():
                if key in families:
                    families[key].add_metric(labels, value)
        yield from (family for family in families.values() if family.samples)
        stamp = GaugeMetricFamily(
            PREFIX + "probe_last_sample_timestamp_seconds",
            "Unix time of the sampling round being served; a stale one means NVML stopped answering.",
            labels=["Hostname"],
        )
        stamp.add_metric([self.hostname], taken_at)
        yield stamp


def render(samples: list[DeviceSample], hostname: str | None = None) -> str:
    """Prometheus text exposition of one round."""
    registry = CollectorRegistry()
    collector = SnapshotCollector(hostname)
    collector.update(samples)
    registry.register(collector)
    return generate_latest(registry).decode()


class GpuProbe:
    """Samples NVML every `interval` seconds on its own thread and serves the latest round over HTTP."""

    def __init__(
        self,
        sampler: NvmlSampler,
        host: str = DEFAULT_HOST,
        port: int = DEFAULT_PORT,
        interval: float = DEFAULT_INTERVAL,
        hostname: str | None = None,
    ) -> None:
        self.sampler, self.host, self.interval = sampler, host, interval
        self.requested_port = port
        self.collector = SnapshotCollector(hostname)
        self.registry = CollectorRegistry()
        self.registry.register(self.collector)
        self._stop = threading.Event()
        self._sampling: threading.Thread | None = None
        self._httpd: WSGIServer | None = None
        self._http_thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The bound port (differs from the requested one when that was 0)."""
        return self._httpd.server_address[1] if self._httpd else self.requested_port

    def start(self) -> None:
        """First round before listening, so that the first scrape already has data; OSError if the port is taken."""
        self.collector.update(self.sampler.sample())
        self._httpd, self._http_thread = start_http_server(self.requested_port, addr=self.host, registry=self.registry)
        self._sampling = threading.Thread(target=self._run, name="rca-gpu-sampler", daemon=True)
        self._sampling.start()
        log.info("gpu-probe: serving http://%s:%d/metrics, sampling every %g s", self.host, self.port, self.interval)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.collector.update(self.sampler.sample())
            except Exception:  # keep serving: the timestamp metric shows the staleness
                log.exception("gpu-probe: sampling round failed")

    def request_stop(self) -> None:
        """Make `wait()` return; safe from a signal handler."""
        self._stop.set()

    def stop(self) -> None:
        """Stop sampling and close the listening socket."""
        self._stop.set()
        if self._sampling:
            self._sampling.join(timeout=self.interval + 30)
        if self._httpd:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._http_thread:
            self._http_thread.join(timeout=10)

    def wait(self) -> None:
        """Block until `stop()`, SIGTERM or Ctrl-C."""
        try:
            while not self._stop.wait(1.0):
                pass
        except KeyboardInterrupt:
            pass


def run_once(out: TextIO, sampler_factory: Callable[[], NvmlSampler] = NvmlSampler) -> None:
    """`rca gpu-probe --once`: one round (after one GPM window) printed as Prometheus text."""
    with sampler_factory() as sampler:
        out.write(render(sampler.sample()))


def serve(
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    interval: float = DEFAULT_INTERVAL,
    sampler_factory: Callable[[], NvmlSampler] = NvmlSampler,
) -> None:
    """`rca gpu-probe`: serve until SIGTERM or Ctrl-C. Raises NoGpuError before binding when NVML is unusable."""
    with sampler_factory() as sampler:
        probe = GpuProbe(sampler, host, port, interval)
        probe.start()
        previous = None
        if threading.current_thread() is threading.main_thread():
            previous = signal.signal(signal.SIGTERM, lambda *_: probe.request_stop())
        try:
            probe.wait()
        finally:
            probe.stop()
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)
