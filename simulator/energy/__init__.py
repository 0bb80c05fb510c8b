"""Power and energy of a simulated step: board power by what each GPU does on the
timeline, the servers, NICs and switches around them, the site's PUE; energy is the integral
over the step (docs/energy.md)."""

from .model import Energy, Phases, gpu_energy_j, step_energy
from .power import GpuPower, PowerTable, Site, capped_gpu, load_power

__all__ = ["Energy", "GpuPower", "Phases", "PowerTable", "Site", "capped_gpu",
           "gpu_energy_j", "load_power", "step_energy"]
