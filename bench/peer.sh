# The benchmarks' peer, the same for every bench script (sourced, not run).
#   peer=(...)    the command that runs its Python: SHMTRAIN_PYTHON (or PYTHON), else the
#                 project's venv with PyTorch 2.13's CPU build (scripts/install-deps.sh --bench
#                 makes .deps/torch-venv), else the system's /usr/bin/python3 (Debian's 1.13)
#   peer_ok       1 when it imports torch;  peer_version: "PyTorch 2.13.0+cpu" or "PyTorch not installed"
# It runs as its users run it: without OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE, which
# some machines set and which hold OpenBLAS (Debian's PyTorch) to older kernels.
_peer_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
_peer_py=${SHMTRAIN_PYTHON:-${PYTHON:-}}
if [ -z "$_peer_py" ]; then
  if [ -x "$_peer_root/.deps/torch-venv/bin/python" ]; then _peer_py=$_peer_root/.deps/torch-venv/bin/python
  else _peer_py=/usr/bin/python3; fi
fi
peer=(env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$_peer_py")
peer_ok=0; "${peer[@]}" -c 'import torch' 2>/dev/null && peer_ok=1
peer_version=$([ $peer_ok = 1 ] && "${peer[@]}" -c 'import torch; print("PyTorch", torch.__version__)' ||
               echo "PyTorch not installed ($_peer_py)")
