"""What the command-line jobs check before they compute: that they can write their outputs."""

from __future__ import annotations

import os

import numpy as np

__all__ = ["check_output"]


def check_output(output: str, *, netcdf: bool = True) -> None:
    """Check, before any computation, that the job can write its outputs to the folder ``output``.

    Creates the folder, writes and removes a small file, and (``netcdf=True``) writes and removes a
    small NetCDF-4 file with xarray (ArviZ writes InferenceData as NetCDF-4, which needs the ``h5netcdf`` or
    ``netCDF4`` package).  Raises ``ValueError`` naming the problem and the fix, so that a run
    that cannot save its results stops at once instead of after the sampling."""
    if os.path.exists(output) and not os.path.isdir(output):
        raise ValueError(f"output {output!r} exists and is not a folder: pass a folder path to --output")
    try:
        os.makedirs(output, exist_ok=True)
        probe = os.path.join(output, f".write-check-{os.getpid()}")
        with open(probe, "w") as fh:
            fh.write("ok")
        os.remove(probe)
    except OSError as err:
        raise ValueError(f"output {output!r} is not a writable folder ({err.strerror}): pass a writable folder "
                         "to --output") from None
    if not netcdf:
        return
    import xarray as xr

    probe = os.path.join(output, f".netcdf-check-{os.getpid()}.nc")
    try:
        xr.Dataset({"x": ("draw", np.zeros(2))}).to_netcdf(probe, format="NETCDF4")
    except (ValueError, ImportError) as err:
        raise ValueError(f"cannot write the InferenceData files (NetCDF-4) to {output!r}: {err}. Install a NetCDF "
                         "backend: pip install h5netcdf (included in pip install 'subsample_mcmc[models]')") from None
    finally:
        if os.path.exists(probe):
            os.remove(probe)
