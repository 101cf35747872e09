# What a dry run on meta must reproduce of a run on emulated cuda:0, from an example's output: the
# device's memory report (per-category current and peak bytes, allocation counts, reserved bytes;
# the device's name blanked, and meta's pinned pool named as the process's), the predicted step
# (its measured time dropped) and, under --dist or --simulate-ranks, rank 0's peak bytes by
# category. Used by bench/meta_table.sh and tests/meta_simulate_check.sh:  awk -f meta_digest.awk OUT
/^memory on (cuda:0|meta)$/ { on = 1; print "memory on DEVICE"; next }
on && /^memory on / { on = 0 }
on { sub(/^memory in pinned host memory \(meta\)$/, "memory in pinned host memory"); print }
/^step on [a-z0-9]+: predicted/ { sub(/; measured.*/, ""); print }
/^rank 0 peak bytes/ { print }
