KF_BUILD=.devbuild BUDGET_S=270 bash tests/device_mla.sh > /dev/null 2>&1
mkdir -p /tmp/keep && cp $OUT/summary.txt /tmp/keep/mla_summary.txt && cp $OUT/logs.tgz /tmp/keep/mla_logs.tgz
SHAPES=" " KF_BUILD=.devbuild BUDGET_S=175 bash tests/device_band.sh > /dev/null 2>&1
cp $OUT/summary.txt /tmp/keep/band_summary.txt; cp $OUT/logs.tgz /tmp/keep/band_logs.tgz
rm -f $OUT/*; cp /tmp/keep/* $OUT/
cat $OUT/mla_summary.txt | cut -c1-600; cat $OUT/band_summary.txt
