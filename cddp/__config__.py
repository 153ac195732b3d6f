"""cddp.__config__ — torch.__config__: what this build of cddp runs on, as text (bug reports,
environment dumps). show() names the release, the BLAS cddp borrows and the kernel it picked,
the CUDA extension and the MPI backend; parallel_info() the thread settings."""
import os
import platform


def show():
    from . import _C, version
    import cddp.distributed as dist
    blas = _C._blas_info()
    lines = [f"cddp {version.cddp} (torch API {version.__version__}) built with:",
             f"  - Python {platform.python_version()}, {platform.machine()}",
             f"  - BLAS: {os.path.basename(blas.get('library') or 'none')} "
             f"(core {blas.get('core')}, float32 GEMM: {blas.get('sgemm_kernel')})",
             f"  - CUDA: {version.cuda or 'not built'}"
             + (f" (archs {version.cuda_archs})" if version.cuda else ""),
             f"  - MPI backend: {'yes' if dist.is_mpi_available() else 'no'}",
             f"  - NCCL backend: {'yes' if dist.is_nccl_available() else 'no'}"]
    return "\n".join(lines) + "\n"


def parallel_info():
    from . import _C
    return (f"ATen/Parallel:\n\tat::get_num_threads() : {_C.get_num_threads()}\n"
            f"\tOMP_NUM_THREADS : {os.environ.get('OMP_NUM_THREADS', '[not set]')}\n"
            f"\tCPU capability usage : cddp's own dispatch (common/clones.h)\n")
