set datafile separator ','
set terminal pngcairo size 900,420 font ',10'
set key outside right
set grid
set xlabel 'minutes'
set output 'soak-memory.png'
set title 'relay resident memory (MiB), three relay processes, a fault every 30 s'
set yrange [0:*]
plot for [i=2:4] 'soak-samples.csv' using ($1/60):i every ::1 with lines title sprintf('relay %d', i-2)
set output 'soak-goroutines.png'
set title 'relay goroutines'
plot for [i=5:7] 'soak-samples.csv' using ($1/60):i every ::1 with lines title sprintf('relay %d', i-5)
set output 'soak-latency.png'
set title 'commit to effect latency per 30 s window of commits (ms)'
set logscale y
set yrange [*:*]
plot 'soak-latency.csv' using ($1/60):3 every ::1 with linespoints title 'p50', \
     'soak-latency.csv' using ($1/60):4 every ::1 with linespoints title 'p99', \
     'soak-latency.csv' using ($1/60):5 every ::1 with lines title 'max'
