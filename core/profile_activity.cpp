// Kernel runs' times from a device's activity log (core/profile_activity.h): correlation ids to
// runs, each run's device work merged into one busy interval set.
#include "core/profile_activity.h"

#include <algorithm>
#include <unordered_map>
#include <utility>

namespace reel::profile {

ActivityTimes resolve_activity(const ActivityLog& log, int device, const std::vector<uint64_t>& runs,
                               int64_t device_to_host_ns) {
  ActivityTimes out;
  if (!log.unavailable.empty()) {
    out.source = "cudaEvent pairs (CUPTI: " + log.unavailable + ")";
    return out;
  }
  if (log.dropped > 0) {
    out.source = "cudaEvent pairs (CUPTI dropped " + std::to_string(log.dropped) + " activity records)";
    return out;
  }
  std::unordered_map<uint64_t, size_t> position;  // run id -> index in `runs`
  for (size_t i = 0; i < runs.size(); ++i) position.emplace(runs[i], i);
  std::unordered_map<uint32_t, size_t> owner;  // API correlation id -> index in `runs`
  for (const ActivityCorrelation& c : log.correlations) {
    const auto it = position.find(c.run);
    if (it != position.end()) owner[c.correlation] = it->second;
  }
  // Each run's intervals; an incomplete record makes the whole log unfit (a run would look short).
  std::vector<std::vector<std::pair<int64_t, int64_t>>> work(runs.size());
  int64_t incomplete = 0;
  for (const ActivityRecord& r : log.records) {
    if (r.device != device) continue;
    if (r.start_ns <= 0 || r.end_ns < r.start_ns) {
      ++incomplete;
      continue;
    }
    const auto it = owner.find(r.correlation);
    if (it == owner.end()) {
      ++out.foreign_records;
      continue;
    }
    work[it->second].emplace_back(r.start_ns, r.end_ns);
  }
  if (incomplete > 0) {
    out.source = "cudaEvent pairs (CUPTI: " + std::to_string(incomplete) + " activity records without timestamps)";
    out.foreign_records = 0;
    return out;
  }
  // Work on this device, none of it in a run that launched any: the ids do not meet (a device
  // numbering or correlation the glue misread). A table of zeros would hide it.
  if (!runs.empty() && out.foreign_records > 0 &&
      std::all_of(work.begin(), work.end(), [](const auto& w) { return w.empty(); })) {
    out.source = "cudaEvent pairs (CUPTI: none of its " + std::to_string(out.foreign_records) +
                 " activity records matched a kernel run)";
    out.foreign_records = 0;
    return out;
  }
  out.used = true;
  out.source = "CUPTI activity records";
  out.times.resize(runs.size());
  for (size_t i = 0; i < runs.size(); ++i) {
    auto& intervals = work[i];
    ActivityTime& t = out.times[i];
    t.records = static_cast<int>(intervals.size());
    if (intervals.empty()) {
      ++out.runs_without_work;
      continue;
    }
    std::sort(intervals.begin(), intervals.end());
    t.start_ns = intervals.front().first + device_to_host_ns;
    int64_t open = intervals.front().first, close = intervals.front().second;
    for (const auto& [start, end] : intervals) {
      if (start > close) {  // a gap: the interval so far is done
        t.dur_ns += close - open;
        open = start;
      }
      close = std::max(close, end);
    }
    t.dur_ns += close - open;
  }
  // Not errors, but what the reader of the table should know: runs timed 0, work seen nowhere.
  std::string notes;
  if (out.runs_without_work > 0)
    notes += std::to_string(out.runs_without_work) + " kernel runs launched no device work";
  if (out.foreign_records > 0)
    notes += (notes.empty() ? "" : "; ") + std::to_string(out.foreign_records) +
             " records of device work outside the profiled runs";
  if (!notes.empty()) out.source += " (" + notes + ")";
  return out;
}

}  // namespace reel::profile
