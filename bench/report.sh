#!/usr/bin/env bash
# The summary tables at the top of docs/benchmarks.md, from the benchmarks
# themselves: one table per area, each with the command that made it, the
# machine and the date.  Runs, in this order:
#   all-reduce vs Open MPI   bench/run-allreduce.sh (2 ranks)
#   step vs PyTorch          bench/run-step.sh (fp32 and bf16)
#   end to end vs DDP        bench/run-train.sh
#   GPT tokens/s             bench/run-gpt.sh (fp32 and bf16)
#   bf16 vs fp32             made here from the step's and the GPT's rows
#   partitioning             shmrun --sweep (lenet, every setting this machine has)
# and writes OUT/summary.md, with each run's whole output beside it
# (OUT/<area>.txt).  --update FILE puts the summary between FILE's markers
#   <!-- bench/report.sh: begin -->  and  <!-- bench/report.sh: end -->
# --from DIR: no runs, the summary made again from DIR's outputs (after a
# change to this script's tables).
# --tiny: seconds-long settings, the same code paths (CI's benchmark smoke;
# its numbers mean nothing).  Without bf16 in oneDNN's ISA the bf16 rows say so;
# without PyTorch (bench/peer.sh) the peer's columns say "not installed".
#
#   bench/report.sh [--tiny] [--out DIR | --from DIR] [--update FILE] [BUILD_DIR]
# A full run took about 45 minutes on 2 cores before the peer ran in each of its modes;
# torch.compile adds a compile (tens of seconds here) to every peer run in that mode.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tiny=0 out= update= build=build from=0
while [ $# -gt 0 ]; do
  case $1 in
    --tiny) tiny=1 ;;
    --out) out=$2; shift ;;
    --from) out=$2; from=1; shift ;;
    --update) update=$2; shift ;;
    -h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "report.sh: unknown flag $1 (see --help)" >&2; exit 2 ;;
    *) build=$1 ;;
  esac
  shift
done
[ -x "$build/shmtrain" ] || { echo "report.sh: $build/shmtrain: not built (make)" >&2; exit 2; }
if [ -n "$update" ] && ! grep -q '<!-- bench/report.sh: begin -->' "$update"; then
  echo "report.sh: --update $update: the file has no '<!-- bench/report.sh: begin -->' marker" >&2; exit 2
fi
out=${out:-bench-report/$(date -u +%Y%m%d-%H%M)}
mkdir -p "$out"
cpu=$(lscpu | sed -n 's/^Model name: *//p')
isa=$(lscpu | grep -o 'avx512_bf16\|amx_bf16' | sort -u | tr '\n' ' ')
machine="$cpu, $(nproc) CPUs${isa:+, ${isa% }}"
# The GPT's bf16 runs need oneDNN's native bf16 (run-step.sh says so itself).
precisions="fp32 bf16"
"$build/bench/st-step-bench" --precision bf16 --models mlp --rounds 1 --seconds 0.01 >/dev/null 2>&1 ||
  precisions=fp32

if [ $tiny = 1 ]; then
  allreduce=(env ROUNDS=1 "$here/run-allreduce.sh" "$build" 2 --min 4 --max 4K --seconds 0.01)
  # the peer's modes without torch.compile, whose compiles alone would outlast the smoke
  step=(env STEP_SECONDS=0.05 MODELS="mlp lenet" PEER_MODES="eager channels_last" "$here/run-step.sh" "$build" 1
        "fp32 bf16")
  train=(env TIME_TO_ACCURACY=0 PEER_MODES="eager channels_last" "$here/run-train.sh" "$build" 1 20 mlp "1x1 2x1")
  gpt=(env PEER_MODES=eager "$here/run-gpt.sh" "$build" 1 4 gpt-mini 1x1 "$precisions")
  sweep_job=(--model mlp --max-steps 30 --log-every 10 --eval-every 30)
  repeats=1
else
  allreduce=(env ROUNDS=3 "$here/run-allreduce.sh" "$build" 2 --min 4 --max 64M)
  step=("$here/run-step.sh" "$build" 3 "fp32 bf16")
  train=(env TIME_TO_ACCURACY=0 "$here/run-train.sh" "$build" 3 300 "mlp lenet cnn" "1x1 1x2 2x1")
  gpt=("$here/run-gpt.sh" "$build" 3 40 "gpt-mini gpt" "1x1 1x2 2x1" "$precisions")
  sweep_job=(--model lenet --epochs 1 --eval-every 100 --log-every 100)
  repeats=3
fi

# Runs one area: its command (relative to the repository, an argument with
# a space or comma in single quotes) and output file.
run() {  # area command...
  local area=$1 a words=(); shift
  [ $from = 1 ] && return 0
  echo "report.sh: $area: $*" >&2
  for a in "$@"; do [[ $a == *[\ ,]* ]] && words+=("'$a'") || words+=("$a"); done
  echo "${words[*]}" | sed "s|$here/|bench/|g" > "$out/$area.cmd"
  "$@" > "$out/$area.txt"
}
run allreduce "${allreduce[@]}"
run step "${step[@]}"
run train "${train[@]}"
run gpt "${gpt[@]}"
sweep_dir=$out/sweep
run sweep "$build/shmrun" --sweep all,core --repeats "$repeats" --quiet --sweep-out "$sweep_dir" -- \
  "$build/shmtrain" "${sweep_job[@]}"

# The first markdown table of a file (its header, rule and rows).
first_table() { awk '/^\|/ {t = 1; print; next} t {exit}' "$1"; }
# The "# date machine ..." line a bench script starts with, without the '#'.
stamp() { sed -n 's/^# \([0-9][0-9-]*T[0-9:]*Z\)/\1/p' "$1" | head -1; }

section() {  # title area [table source]
  echo "### $2"
  echo
  echo "\`$(sed "s|$build/|BUILD/|g; s|$build |BUILD |g; s|$out/|OUT/|g" "$out/$1.cmd")\`"
  echo
  [ -n "$(stamp "$out/$1.txt")" ] && echo "$(stamp "$out/$1.txt")" && echo
  first_table "${3:-$out/$1.txt}"
  echo
}

# bf16 over fp32, from the rows the step and GPT tables already hold:
# step ms (fp32 / bf16) and tokens/s (bf16 / fp32); above 1: bf16 is faster.
bf16_table() {
  echo "| model | threads or instances x cores | fp32 | bf16 | bf16 speed-up |"
  echo "|---|---|---|---|---|"
  first_table "$out/step.txt" | awk -F'|' 'NR > 2 {gsub(/ /, ""); k = $2 "|" $3
      if ($4 == "fp32") f[k] = $5; else if ($4 == "bf16") b[k] = $5; if (!(k in seen)) {seen[k] = 1; o[++n] = k}}
    END {for (i = 1; i <= n; i++) {k = o[i]; split(k, p, "|")
      r = (b[k] + 0 > 0 && f[k] + 0 > 0) ? sprintf("%.2fx", f[k] / b[k]) : "-"
      printf "| %s | %s threads | %s ms | %s ms | %s |\n", p[1], p[2], f[k], (b[k] + 0 > 0 ? b[k] : "no native bf16"), r}}'
  first_table "$out/gpt.txt" | awk -F'|' 'NR > 2 {gsub(/ /, ""); k = $2 "|" $3
      if ($4 == "fp32") f[k] = $5; else if ($4 == "bf16") b[k] = $5; if (!(k in seen)) {seen[k] = 1; o[++n] = k}}
    END {for (i = 1; i <= n; i++) {k = o[i]; split(k, p, "|")
      r = (b[k] + 0 > 0 && f[k] + 0 > 0) ? sprintf("%.2fx", b[k] / f[k]) : "-"
      printf "| %s | %s | %s tokens/s | %s | %s |\n", p[1], p[2], f[k], (b[k] + 0 > 0 ? b[k] " tokens/s" : "-"), r}}'
}

{
  echo "Made by \`bench/report.sh$([ $tiny = 1 ] && echo ' --tiny')\` on $(date -u +%Y-%m-%d) on $machine;"
  echo "oneDNN $(sed -n 's/.*"onednn":"\([^"]*\)","isa":"\([^"]*\)".*/\1, ISA \2/p' "$out/gpt.txt" | head -1)."
  echo "Every table compares runs interleaved in one session: ratios are the result, absolute figures move by"
  echo "tens of percent on this shared machine. Each area's whole output lies beside the summary (bench-report/DATE/)."
  echo "PyTorch runs in each of its modes (eager, channels_last, torch.compile; PEER_MODES), PyTorch DDP too,"
  echo "and each row names its fastest."
  echo
  section allreduce "All-reduce against Open MPI (2 ranks; µs and shmtrain / MPI)"
  section step "Training step against PyTorch (batch 64)"
  section train "End to end against PyTorch DDP (samples/s, steady state)"
  section gpt "GPT tokens/s against PyTorch"
  echo "### bf16 against fp32 (the same build; from the two tables above)"
  echo
  bf16_table
  echo
  section sweep "Partitioning (shmrun --sweep; the best setting in bold)" "$sweep_dir/report.md"
} > "$out/summary.md"

if [ -n "$update" ]; then
  tmpf=$(mktemp)
  awk -v s="$out/summary.md" '
    /<!-- bench\/report.sh: begin -->/ {print; while ((getline l < s) > 0) print l; skip = 1; next}
    /<!-- bench\/report.sh: end -->/ {skip = 0}
    !skip' "$update" > "$tmpf"
  cat "$tmpf" > "$update" && rm -f "$tmpf"
  echo "report.sh: $update updated" >&2
fi
echo "report.sh: $out/summary.md" >&2
