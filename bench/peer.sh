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
# peer_fastest MODES higher|lower CMD...: the mode of MODES for which `CMD... MODE` prints the
# best figure (a failed mode's "nan", or nothing, never is), and that figure: "compile 272.4";
# nothing when every mode failed.  The peer is compared in its fastest mode (eager,
# channels_last, torch.compile: whichever wins on that row).
peer_fastest() {  # its locals prefixed: CMD reads its caller's variables (m, t, q...) by bash's dynamic scope
  local _pf_modes=$1 _pf_better=$2 _pf_best='' _pf_value='' _pf_mode _pf_v; shift 2
  for _pf_mode in $_pf_modes; do
    _pf_v=$("$@" "$_pf_mode")
    if awk -v v="$_pf_v" -v b="$_pf_value" -v d="$_pf_better" 'BEGIN { exit !(v ~ /^[0-9]+\.?[0-9]*$/ &&
         (b == "" || (d == "higher" ? v + 0 > b + 0 : v + 0 < b + 0))) }'; then
      _pf_best=$_pf_mode; _pf_value=$_pf_v
    fi
  done
  if [ -n "$_pf_best" ]; then echo "$_pf_best $_pf_value"; fi
}
