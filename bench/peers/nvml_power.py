"""nvml_power.py: the GPU's power, SM clock and energy over a stretch of a peer's run, read from NVML (ctypes on the
driver's libnvidia-ml.so.1, as trainbench's bench/telemetry does), so that a peer's record carries what trainbench's
does. Between start() and stop() a thread samples every `period_s`:
  power_w_mean, power_w_max (nvmlDeviceGetPowerUsage, mW), sm_clock_mhz_mean, sm_clock_mhz_min (nvmlDeviceGetClockInfo),
  power_capped_share (samples whose clocks-event reasons hold the software power cap, 0x4),
  energy_j = energy counter(stop) - energy counter(start) (nvmlDeviceGetTotalEnergyConsumption, mJ), else
  power_w_mean x seconds.
Without NVML (no driver, a CPU run) `summary()` is {"available": False, "reason": ...}; nothing raises.
"""
import ctypes
import threading
import time

_SM_CLOCK = 1  # NVML_CLOCK_SM
_SW_POWER_CAP = 0x4  # nvmlClocksEventReasonSwPowerCap


class NvmlPower:
    def __init__(self, pci_bus_id=None, index=0, period_s=0.02):
        """pci_bus_id: "DDDDDDDD:BB:DD.F" of the GPU (NVML and CUDA number GPUs differently), else NVML index."""
        self.period_s, self.reason, self.samples = period_s, "", []
        self._stop, self._thread, self._t0, self._t1, self._e0, self._e1 = threading.Event(), None, 0, 0, None, None
        try:
            self._nvml = ctypes.CDLL("libnvidia-ml.so.1")
            self._check(self._nvml.nvmlInit_v2(), "nvmlInit")
            self._dev = ctypes.c_void_p()
            if pci_bus_id:
                self._check(self._nvml.nvmlDeviceGetHandleByPciBusId_v2(pci_bus_id.encode(), ctypes.byref(self._dev)),
                            f"no GPU at PCI bus id {pci_bus_id}")
            else:
                self._check(self._nvml.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(self._dev)),
                            f"no GPU {index}")
            self._reasons = getattr(self._nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
                self._nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None)  # the older name
        except (OSError, RuntimeError, AttributeError) as e:
            self._nvml, self.reason = None, f"NVML unavailable: {e}"

    @staticmethod
    def _check(rc, what):
        if rc != 0:
            raise RuntimeError(f"{what} (NVML error {rc})")

    def _energy_mj(self):
        mj = ctypes.c_ulonglong()
        return mj.value if self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._dev, ctypes.byref(mj)) == 0 else None

    def _sample(self):
        mw, mhz, reasons = ctypes.c_uint(), ctypes.c_uint(), ctypes.c_ulonglong()
        if self._nvml.nvmlDeviceGetPowerUsage(self._dev, ctypes.byref(mw)) != 0:
            return
        self._nvml.nvmlDeviceGetClockInfo(self._dev, _SM_CLOCK, ctypes.byref(mhz))
        capped = bool(self._reasons and self._reasons(self._dev, ctypes.byref(reasons)) == 0 and
                      reasons.value & _SW_POWER_CAP)
        self.samples.append((mw.value / 1e3, mhz.value, capped))

    def _run(self):
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.period_s)

    def start(self):
        if not self._nvml:
            return
        self.samples.clear()
        self._stop.clear()
        self._t0, self._e0 = time.perf_counter(), self._energy_mj()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def stop(self):
        if not self._thread:
            return
        self._stop.set()
        self._thread.join()
        self._thread = None
        self._t1, self._e1 = time.perf_counter(), self._energy_mj()

    def summary(self):
        if not self._nvml:
            return {"available": False, "reason": self.reason}
        if not self.samples:
            return {"available": False, "reason": "no samples (start() and stop() bracket the measured work)"}
        n, seconds = len(self.samples), self._t1 - self._t0
        power = [p for p, _, _ in self.samples]
        clock = [c for _, c, _ in self.samples]
        mean_w = sum(power) / n
        counter = self._e0 is not None and self._e1 is not None and seconds >= 1.0  # the counter moves in coarse steps
        return {"available": True, "samples": n, "seconds": seconds, "power_w_mean": mean_w, "power_w_max": max(power),
                "sm_clock_mhz_mean": sum(clock) / n, "sm_clock_mhz_min": min(clock),
                "power_capped_share": sum(1 for _, _, c in self.samples if c) / n,
                "energy_j": (self._e1 - self._e0) / 1e3 if counter else mean_w * seconds}


def for_torch_device(torch, index):
    """An NvmlPower for CUDA device `index`, found by its PCI bus id where torch reports it."""
    props = torch.cuda.get_device_properties(index)
    bus = getattr(props, "pci_bus_id", None)
    if bus is None:
        return NvmlPower(index=index)
    return NvmlPower(pci_bus_id=f"{getattr(props, 'pci_domain_id', 0):08x}:{bus:02x}:{props.pci_device_id:02x}.0")
