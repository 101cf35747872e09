// A run's whole state gathered and put back (see training_state.h).
#include "optim/training_state.h"

#include <cstdio>
#include <string>

#include "core/error.h"
#include "core/random.h"

namespace reel::optim {

namespace {

constexpr const char* kFormat = "reel-training-state-1";
constexpr const char* kModel = "model.";
constexpr const char* kOptimizer = "optimizer.";

// A double in text that reads back to the same bits.
std::string exact(double v) {
  char s[40];
  std::snprintf(s, sizeof s, "%.17g", v);
  return s;
}

const std::string& need(const Metadata& m, const std::string& key, const std::string& source) {
  const auto it = m.find(key);
  REEL_CHECK(it != m.end(), "resume from '", source, "': its metadata has no '", key, "'");
  return it->second;
}

template <typename T>
T number(const Metadata& m, const std::string& key, const std::string& source) {
  const std::string& text = need(m, key, source);
  try {
    size_t used = 0;
    T v{};
    if constexpr (std::is_same_v<T, double>) v = std::stod(text, &used);
    else if constexpr (std::is_same_v<T, uint64_t>) v = std::stoull(text, &used);
    else v = std::stoll(text, &used);
    if (used == text.size()) return v;
  } catch (const std::exception&) {
  }
  REEL_FAIL("resume from '", source, "': '", key, "' = '", text, "' is not a number");
}

}  // namespace

TrainingState gather_training_state(const StateDict& model_state, const StateDict& optimizer_state, double lr,
                                    const GradScaler* scaler, const Accumulator* accumulator, const Metadata& extra) {
  TrainingState s;
  s.metadata = extra;
  for (const auto& [name, t] : model_state) s.tensors[kModel + name] = t;
  for (const auto& [key, t] : optimizer_state) s.tensors[kOptimizer + key] = t;
  Generator& g = default_generator();
  s.metadata["reel.format"] = kFormat;
  s.metadata["generator.seed"] = std::to_string(g.seed());
  s.metadata["generator.offset"] = std::to_string(g.offset());
  s.metadata["optimizer.lr"] = exact(lr);
  if (scaler) {
    s.metadata["scaler.scale"] = exact(scaler->scale());
    s.metadata["scaler.clean_windows"] = std::to_string(scaler->clean_windows_in_a_row());
    s.metadata["scaler.skipped_windows"] = std::to_string(scaler->skipped_windows());
  }
  if (accumulator) s.metadata["accumulator.skipped_steps"] = std::to_string(accumulator->skipped_steps());
  return s;
}

TrainingState gather_training_state(const StateDict& model_state, const Optimizer& optimizer,
                                    const GradScaler* scaler, const Accumulator* accumulator, const Metadata& extra) {
  return gather_training_state(model_state, optimizer.state_dict(), optimizer.lr(), scaler, accumulator, extra);
}

Metadata restore_training_state(const TrainingState& state, const std::function<void(const StateDict&)>& load_model,
                                Optimizer& optimizer, GradScaler* scaler, Accumulator* accumulator,
                                const std::string& source,
                                const std::function<void(const StateDict&)>& load_optimizer) {
  const Metadata& m = state.metadata;
  REEL_CHECK(need(m, "reel.format", source) == kFormat, "resume from '", source, "': format '", m.at("reel.format"),
             "', this reel reads '", kFormat, "'");
  const bool saved_scaler = m.count("scaler.scale") > 0;
  REEL_CHECK(saved_scaler == (scaler != nullptr), "resume from '", source, "': the checkpoint was made ",
             saved_scaler ? "with" : "without", " a loss scaler (--precision f16) and this run has ",
             scaler ? "one" : "none", ": resume with the precision it was made with");
  StateDict weights, slots;
  for (const auto& [name, t] : state.tensors) {
    if (name.rfind(kModel, 0) == 0) weights[name.substr(std::string(kModel).size())] = t;
    else if (name.rfind(kOptimizer, 0) == 0) slots[name.substr(std::string(kOptimizer).size())] = t;
    else REEL_FAIL("resume from '", source, "': unexpected tensor '", name, "' (neither model. nor optimizer.)");
  }
  try {
    load_model(weights);
    if (load_optimizer) load_optimizer(slots);
    else optimizer.load_state_dict(slots);
  } catch (const Error& e) {
    REEL_FAIL("resume from '", source, "': it holds another model or optimizer than this run's: ", e.what());
  }
  optimizer.set_lr(number<double>(m, "optimizer.lr", source));
  if (scaler)
    scaler->load(number<double>(m, "scaler.scale", source), number<int64_t>(m, "scaler.clean_windows", source),
                 number<int64_t>(m, "scaler.skipped_windows", source));
  if (accumulator && m.count("accumulator.skipped_steps"))
    accumulator->set_skipped_steps(number<int64_t>(m, "accumulator.skipped_steps", source));
  Generator& g = default_generator();
  g.manual_seed(number<uint64_t>(m, "generator.seed", source));
  g.set_offset(number<uint64_t>(m, "generator.offset", source));
  return m;
}

}  // namespace reel::optim
