# gnuplot script written by shmrun --sweep; run it in this directory: gnuplot plot.gp
set terminal svg size 760,440 dynamic font 'sans,12' background '#ffffff'
set datafile missing '-'
set grid ytics lc '#dddddd'
set border 3
set tics nomirror
set key top left

set output 'throughput.svg'
set title 'Throughput against instances (median, bars: range)'
set xlabel 'instances (x cores each)'
set ylabel 'samples/s, all instances'
set logscale x 2
set xtics ('1x16' 1, '2x8' 2, '4x4' 4, '8x2' 8, '16x1' 16)
set yrange [0:*]
set offsets graph 0.05, graph 0.05, 0, 0
plot 'throughput.dat' using 1:4:5:6 with yerrorlines lw 2 pt 7 lc '#1f77b4' title 'shmtrain', \
     '' using 1:7:8:9 with yerrorlines lw 2 pt 5 dt 2 lc '#d62728' title 'PyTorch DDP'
unset logscale x
unset xtics
set xtics
set offsets 0, 0, 0, 0

set output 'timesplit.svg'
set title 'Where a step goes (shmtrain, instance 0, median)'
set xlabel 'setting (instances x cores)'
set ylabel 'ms per step'
set style data histograms
set style histogram rowstacked
set style fill solid 0.85 border -1
set boxwidth 0.6
set key top right
set yrange [0:*]
plot 'timesplit.dat' using 2:xtic(1) lc '#1f77b4' title 'compute', \
     '' using 3 lc '#2ca02c' title 'all-reduce', \
     '' using 4 lc '#ff7f0e' title 'wait', \
     '' using 5 lc '#bbbbbb' title 'other'
set style data lines

set output 'accuracy.svg'
set title 'Test accuracy against wall time'
set xlabel 'seconds since start'
set ylabel 'test accuracy (%)'
set key bottom right
set yrange [*:*]
plot 'accuracy.dat' index 0 using 1:2 with linespoints lw 2 pt 7 ps 0.6 dt 1 lc 1 title '1x16 shmtrain', \
     'accuracy.dat' index 1 using 1:2 with linespoints lw 2 pt 7 ps 0.6 dt 2 lc 1 title '1x16 PyTorch', \
     'accuracy.dat' index 2 using 1:2 with linespoints lw 2 pt 7 ps 0.6 dt 1 lc 2 title '2x8 shmtrain', \
     'accuracy.dat' index 3 using 1:2 with linespoints lw 2 pt 7 ps 0.6 dt 2 lc 2 title '2x8 PyTorch', \
     'accuracy.dat' index 4 using 1:2 with linespoints lw 2 pt 7 ps 0.6 dt 1 lc 3 title '4x4 shmtrain', \
     'accuracy.dat' index 5 using 1:2 with linespoints lw 2 pt 7 ps 0.6 dt 2 lc 3 title '4x4 PyTorch', \
     'accuracy.dat' index 6 using 1:2 with linespoints lw 2 pt 7 ps 0.6 dt 1 lc 4 title '8x2 shmtrain', \
     'accuracy.dat' index 7 using 1:2 with linespoints lw 2 pt 7 ps 0.6 dt 2 lc 4 title '8x2 PyTorch', \
     'accuracy.dat' index 8 using 1:2 with linespoints lw 2 pt 7 ps 0.6 dt 1 lc 5 title '16x1 shmtrain', \
     'accuracy.dat' index 9 using 1:2 with linespoints lw 2 pt 7 ps 0.6 dt 2 lc 5 title '16x1 PyTorch'
