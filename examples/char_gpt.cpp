// char_gpt: a character-level GPT trained on the fortune cookie files of Debian's package
// fortunes, then asked to write a few fortunes of its own.
//
//   ./char_gpt                                   # under 2 minutes on 2 CPU cores, then a sample
//   ./char_gpt --save gpt.safetensors            # keep the weights (and the vocabulary)
//   ./char_gpt --max-steps 0 --load gpt.safetensors --sample-chars 1000   # sample only
//   ./char_gpt --device cuda --checkpoint sqrt --batch 64 --accum-steps 4    # on a GPU (nvcc build)
//   mpirun -np 2 ./char_gpt --dist --threads 1   # data parallel: each rank takes half of each batch
//   mpirun -np 2 ./char_gpt --dist --zero 3 --checkpoint sqrt   # parameters sharded by each Linear / LayerNorm (FSDP)
//   mpirun -np 2 ./char_gpt --dist --zero 3 --fsdp-units block   # ... by block: fewer collectives, more in flight
//   ./char_gpt --fused-loss                      # LM head + loss chunked (GPT::loss): no (B, T, V) logits kept
//   ./char_gpt --precision bf16                  # forwards (training and validation) under autograd::Autocast
//   ./char_gpt --text book.txt --checkpoint-dir run --save-every 100 --metrics run/metrics.jsonl
//                                                # your own text; killed, the same command with --resume goes on
//   ./char_gpt --device meta --preset gpt2-xl --batch 8 --max-steps 2 --profile t.json --predict h100
//                                                # a dry run: GPT-2 XL's memory and H100 step, no GPU
//   ./char_gpt --preset gpt2-medium --batch 16 --fit 24GiB --predict h100
//                                                # the levers that fit a 24 GiB card, fastest first (examples/fit.h)
//   mpirun -np 2 ./char_gpt --dist --zero 3 --precision bf16   # and bf16 parameters gathered from f32 master shards
//
// Data: every byte value of the corpus is a token. The text is cut into 100 blocks at line ends
// and every 10th block goes to validation (an interleaved 90/10 split, so both halves hold the
// same mix of fortune files); a --text file's last tenth is its validation split. Training draws random windows of block_size + 1 characters; the
// validation loss is measured on a fixed set of evenly spaced windows, so two runs (or a run and
// a reloaded model) see exactly the same tokens. The unigram entropy of the training text is
// the loss of a model that ignores context: what the model learns beyond it is context.
//
// Each optimizer step is one accumulation window (optim::Accumulator) of --batch sequences cut
// into --accum-steps micro-batches; each micro-batch's loss is SUM-reduced over its tokens and the
// window divides by the window's token count, so the step does not depend on --accum-steps.
//
// The defaults (3 blocks of width 96, 64-character windows, 1500 steps of 32) train in a minute or
// two on 2 CPU cores and reach a validation loss well below the unigram entropy: text with
// fortune-like lines, words and "-- Author" attributions (--min-gain makes that a check). The
// table "char_gpt's default run" of docs/benchmarks.md has a run's speed and losses.
//
// Saved files carry the vocabulary and the model's shape in the safetensors metadata: --load
// rebuilds the same model and refuses a corpus whose vocabulary differs.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "batch_upload.h"
#include "checkpoint_budget.h"
#include "fit.h"
#include "metrics.h"
#include "reel.h"
#include "run_checkpoints.h"
#include "train_options.h"

using namespace reel;

namespace {

struct Options {
  examples::TrainOptions train;
  int64_t n_layer = 3, n_head = 4, n_embd = 96, block_size = 64;
  std::string preset;  // gpt2, gpt2-medium, gpt2-large, gpt2-xl: GPT-2's shapes (overrides the four above)
  double dropout = 0.0;
  int64_t eval_every = 250;
  int64_t eval_windows = 256;
  int64_t sample_chars = 600;
  double temperature = 0.8;
  int64_t top_k = 0;
  std::string corpus_dir = nn::kFortunesDir;
  std::string text_file;  // --text: train on this UTF-8 file instead of the fortunes
  double min_gain = 0;  // checked only when given
  bool fused_loss = false;  // GPT::loss (linear_cross_entropy) instead of cross_entropy(gpt(x), y)
  std::string fit;  // --fit SIZE: the levers searched on meta (examples/fit.h) instead of training
};

// One micro-batch's loss, SUM-reduced over its tokens: the head and the loss fused and chunked
// (nn::GPT::loss) or the logits then cross_entropy; equal up to rounding. Under autocast when
// `precision` is bf16 or f16 (--precision; the backward runs outside, in the recorded dtypes).
Tensor batch_loss(nn::GPT& gpt, const Tensor& x, const Tensor& y, bool fused, std::optional<DType> precision) {
  autograd::Autocast amp(precision);
  return fused ? gpt.loss(x, y, -100, "sum") : cross_entropy(gpt(x), y, -100, "sum");
}

// ---- the corpus --------------------------------------------------------------------------

struct Vocab {
  std::vector<unsigned char> chars;  // token id -> byte
  int lookup[256];                   // byte -> token id, -1 when absent

  explicit Vocab(std::vector<unsigned char> c) : chars(std::move(c)) {
    std::fill(std::begin(lookup), std::end(lookup), -1);
    for (size_t i = 0; i < chars.size(); ++i) lookup[chars[i]] = static_cast<int>(i);
  }
  static Vocab of(const std::string& text) {
    bool seen[256] = {};
    for (unsigned char ch : text) seen[ch] = true;
    std::vector<unsigned char> chars;
    for (int b = 0; b < 256; ++b)
      if (seen[b]) chars.push_back(static_cast<unsigned char>(b));
    return Vocab(chars);
  }
  int64_t size() const { return static_cast<int64_t>(chars.size()); }
  std::vector<int32_t> encode(const std::string& text) const {
    std::vector<int32_t> ids(text.size());
    for (size_t i = 0; i < text.size(); ++i) ids[i] = lookup[static_cast<unsigned char>(text[i])];
    return ids;
  }
  // "10,32,33,...": byte values, so the metadata stays valid JSON whatever the bytes are.
  std::string str() const {
    std::string s;
    for (unsigned char ch : chars) s += (s.empty() ? "" : ",") + std::to_string(ch);
    return s;
  }
  static Vocab parse(const std::string& s, const std::string& source) {
    std::vector<unsigned char> chars;
    size_t pos = 0;
    while (pos < s.size()) {
      size_t end = s.find(',', pos);
      if (end == std::string::npos) end = s.size();
      int value = -1;
      try {
        value = std::stoi(s.substr(pos, end - pos));
      } catch (const std::exception&) {
      }
      REEL_CHECK(value >= 0 && value < 256, source, ": malformed vocabulary in the metadata: '", s, "'");
      chars.push_back(static_cast<unsigned char>(value));
      pos = end + 1;
    }
    return Vocab(chars);
  }
};

std::string printable(unsigned char ch) {
  if (ch == '\n') return "\\n";
  if (ch == '\t') return "\\t";
  if (ch < 32 || ch >= 127) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "\\x%02x", ch);
    return buf;
  }
  return std::string(1, static_cast<char>(ch));
}

// 100 blocks cut at line ends; block i goes to validation when i % 10 == 9.
void split_corpus(const std::string& text, std::string& train, std::string& val) {
  const size_t n = text.size(), block = std::max<size_t>(1, n / 100);
  size_t begin = 0;
  for (int i = 0; begin < n; ++i) {
    size_t end = begin + block >= n ? std::string::npos : text.find('\n', begin + block);
    end = end == std::string::npos ? n : end + 1;
    (i % 10 == 9 ? val : train).append(text, begin, end - begin);
    begin = end;
  }
}

// --text FILE: the file's bytes, which must be UTF-8 text; reel::Error for a file that is missing,
// empty or not UTF-8, naming it (and the first bad byte's offset).
std::string read_text_file(const std::string& path) {
  std::error_code ec;
  REEL_CHECK(std::filesystem::is_regular_file(path, ec), "--text '", path, "': no such file");
  std::ifstream f(path, std::ios::binary);
  REEL_CHECK(f.good(), "--text '", path, "': cannot open it");
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  REEL_CHECK(!text.empty(), "--text '", path, "': the file is empty");
  // UTF-8: a lead byte and its continuation bytes; no overlong forms, surrogates or values past U+10FFFF.
  for (size_t i = 0; i < text.size();) {
    const auto b = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
    const unsigned char c = b(i);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
    bool ok = n > 0 && i + n <= text.size();
    for (size_t k = 1; ok && k < n; ++k) ok = (b(i + k) & 0xc0) == 0x80;
    if (ok && n == 2) ok = c >= 0xc2;
    if (ok && n == 3) ok = !(c == 0xe0 && b(i + 1) < 0xa0) && !(c == 0xed && b(i + 1) >= 0xa0);
    if (ok && n == 4) ok = c <= 0xf4 && !(c == 0xf0 && b(i + 1) < 0x90) && !(c == 0xf4 && b(i + 1) >= 0x90);
    if (!ok) {
      char byte[8];
      std::snprintf(byte, sizeof byte, "0x%02x", c);
      REEL_FAIL("--text '", path, "': not UTF-8 text (byte ", i, ", ", byte, ", begins no valid character)");
    }
    i += n;
  }
  return text;
}

// --text's split: the last tenth (from the line start nearest it) is validation, the rest training.
void split_tail(const std::string& text, std::string& train, std::string& val) {
  size_t cut = text.size() - text.size() / 10;
  const size_t line = text.rfind('\n', cut);
  if (line != std::string::npos && line + 1 < text.size() && line > text.size() / 2) cut = line + 1;
  while (cut < text.size() && (static_cast<unsigned char>(text[cut]) & 0xc0) == 0x80) ++cut;  // a character's start
  train = text.substr(0, cut);
  val = text.substr(cut);
}

// Entropy (nats) of the byte frequencies of `text`.
double unigram_entropy(const std::string& text) {
  double counts[256] = {};
  for (unsigned char ch : text) counts[ch] += 1;
  double h = 0;
  for (double c : counts)
    if (c > 0) {
      const double p = c / static_cast<double>(text.size());
      h -= p * std::log(p);
    }
  return h;
}

// FNV-1a, to tell whether a loaded model was evaluated on the same text it was saved with.
std::string corpus_hash(const std::string& text) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : text) h = (h ^ ch) * 1099511628211ull;
  char buf[20];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, h);
  return buf;
}

// ---- batches -------------------------------------------------------------------------------

struct Batch {
  Tensor x, y;  // (b, T) i32: input characters and the next character of each
};

// With `upload`, x and y go up together as its slot `slot`'s (2, b, T) tensor (one asynchronous
// copy from pinned memory into a tensor that keeps its address: examples/batch_upload.h), x and y
// its two halves; without, each by a blocking copy (evaluation, the dry runs of --fit).
Batch make_batch(const std::vector<int32_t>& ids, const std::vector<size_t>& starts, int64_t T, Device device,
                 examples::BatchUpload* upload = nullptr, size_t slot = 0) {
  const int64_t b = static_cast<int64_t>(starts.size());
  std::vector<int32_t> xy(static_cast<size_t>(2 * b * T));  // (2, b, T): x then y
  const auto y = xy.begin() + b * T;
  for (size_t i = 0; i < starts.size(); ++i) {
    const auto window = ids.begin() + static_cast<std::ptrdiff_t>(starts[i]);
    const std::ptrdiff_t row = static_cast<std::ptrdiff_t>(i) * T;
    std::copy_n(window, T, xy.begin() + row);
    std::copy_n(window + 1, T, y + row);
  }
  if (upload) {
    const Tensor both = upload->put(slot, xy.data(), {2, b, T}, DType::i32, device);  // (2, b, T)
    return {select(both, 0, 0), select(both, 0, 1)};
  }
  return {from_vector(std::vector<int32_t>(xy.begin(), y), {b, T}, device),
          from_vector(std::vector<int32_t>(y, xy.end()), {b, T}, device)};
}

// Mean loss per character over `windows` evenly spaced windows of `ids`, in eval mode, 16 windows
// per forward (fixed, so the figure does not depend on --batch or --accum-steps).
double evaluate(nn::GPT& gpt, const std::vector<int32_t>& ids, int64_t T, int64_t windows, Device device,
                bool fused_loss, std::optional<DType> precision) {
  autograd::NoGrad no_grad;
  const bool was_training = gpt.training();
  gpt.eval();
  const size_t last = ids.size() - static_cast<size_t>(T) - 1;  // the last valid start
  std::vector<size_t> starts;
  for (int64_t i = 0; i < windows; ++i)
    starts.push_back(windows == 1 ? 0 : static_cast<size_t>(static_cast<double>(last) * static_cast<double>(i) /
                                                            static_cast<double>(windows - 1)));
  double total = 0;
  for (size_t i = 0; i < starts.size(); i += 16) {
    const std::vector<size_t> chunk(starts.begin() + static_cast<std::ptrdiff_t>(i),
                                    starts.begin() + static_cast<std::ptrdiff_t>(std::min(starts.size(), i + 16)));
    const Batch b = make_batch(ids, chunk, T, device);
    total += batch_loss(gpt, b.x, b.y, fused_loss, precision).item();
  }
  gpt.train(was_training);
  return total / static_cast<double>(windows * T);
}

// ---- save / load ---------------------------------------------------------------------------

int64_t meta_int(const nn::Metadata& meta, const std::string& key, const std::string& path) {
  const auto it = meta.find(key);
  REEL_CHECK(it != meta.end(), "'", path, "' has no '", key, "' in its metadata: not a char_gpt file");
  try {
    return std::stoll(it->second);
  } catch (const std::exception&) {
    REEL_FAIL("'", path, "': metadata '", key, "' is not an integer: '", it->second, "'");
  }
}

// The model shape stored in `meta` replaces the command line's; an option given explicitly with
// another value is an error rather than silently ignored.
void config_from_metadata(const nn::Metadata& meta, const std::string& path, const CLI::App& app,
                          nn::GPTConfig& config) {
  const std::pair<const char*, int64_t*> fields[] = {{"n_layer", &config.n_layer},
                                                     {"n_head", &config.n_head},
                                                     {"n_embd", &config.n_embd},
                                                     {"block_size", &config.block_size}};
  for (const auto& [key, value] : fields) {
    const int64_t stored = meta_int(meta, key, path);
    std::string option = std::string("--") + key;
    std::replace(option.begin(), option.end(), '_', '-');
    REEL_CHECK(app.count(option) == 0 || *value == stored, option, " ", *value, " does not match ", key, " = ",
               stored, " of the model in '", path, "' (leave it out to use the file's)");
    *value = stored;
  }
}

void check_vocab(const Vocab& stored, const Vocab& corpus, const std::string& path, const std::string& dir) {
  if (stored.chars == corpus.chars) return;
  // The characters of `a` missing from `b`, the first 16 of them.
  auto missing = [](const Vocab& a, const Vocab& b) {
    std::string s;
    int n = 0;
    for (unsigned char ch : a.chars)
      if (b.lookup[ch] < 0 && ++n <= 16) s += " '" + printable(ch) + "'";
    if (n > 16) s += " and " + std::to_string(n - 16) + " more";
    return s;
  };
  const std::string only_file = missing(stored, corpus), only_corpus = missing(corpus, stored);
  REEL_FAIL("the vocabulary of '", path, "' (", stored.size(), " characters) does not match the corpus in '", dir,
            "' (", corpus.size(), " characters)", only_file.empty() ? "" : "; only in the file:", only_file,
            only_corpus.empty() ? "" : "; only in the corpus:", only_corpus,
            (only_file.empty() && only_corpus.empty()) ? "; same characters in another order" : "");
}

// GPT-2's shapes (Radford et al. 2019, the released checkpoints): vocabulary 50,257, context 1,024,
// the head tied to the token embedding; the characters' ids are a small part of the vocabulary.
void apply_preset(const std::string& name, nn::GPTConfig& config) {
  struct Preset {
    const char* name;
    int64_t n_layer, n_head, n_embd;
  };
  static const Preset presets[] = {
      {"gpt2", 12, 12, 768}, {"gpt2-medium", 24, 16, 1024}, {"gpt2-large", 36, 20, 1280}, {"gpt2-xl", 48, 25, 1600}};
  for (const Preset& p : presets)
    if (name == p.name) {
      REEL_CHECK(config.vocab_size <= 50257, "--preset ", name, ": the corpus has ", config.vocab_size,
                 " distinct tokens, more than GPT-2's 50,257");
      config.vocab_size = 50257;
      config.block_size = 1024;
      config.n_layer = p.n_layer;
      config.n_head = p.n_head;
      config.n_embd = p.n_embd;
      config.tie_weights = true;
      return;
    }
  REEL_FAIL("--preset '", name, "': expected gpt2, gpt2-medium, gpt2-large or gpt2-xl");
}

// What --zero 2/3 shard the GPT by: its blocks (under --fsdp-units block), and the modules kept whole
// in the root unit (wte, read again by the tied head; an untied head, whose weight the fused loss
// reads directly).
examples::FitUnits sharding_units(nn::GPT& gpt) {
  examples::FitUnits u;
  for (int64_t i = 0; i < gpt.h->size(); ++i) u.blocks.push_back(&(*gpt.h)[i]);
  u.keep_whole.push_back(gpt.wte.get());
  if (gpt.lm_head) u.keep_whole.push_back(gpt.lm_head.get());
  return u;
}

// What a saved model or a run's checkpoint says of the model: its format, vocabulary, shape and the
// corpus it was trained on (config_from_metadata and check_vocab read it back).
nn::Metadata model_metadata(const nn::GPTConfig& config, const Vocab& vocab, const std::string& corpus) {
  return {{"format", "char_gpt"},
          {"vocab", vocab.str()},
          {"n_layer", std::to_string(config.n_layer)},
          {"n_head", std::to_string(config.n_head)},
          {"n_embd", std::to_string(config.n_embd)},
          {"block_size", std::to_string(config.block_size)},
          {"corpus", corpus}};
}

// --fit's candidate (examples/fit.h): the GPT made on `t`'s device (meta) with its levers, the
// optimizer and accumulation window as training makes them, and the function that runs one
// optimizer step of --batch windows (their positions do not matter on meta: nothing is read).
examples::FitStep fit_step(const examples::TrainOptions& t, const nn::GPTConfig& config,
                           const std::vector<int32_t>& ids, bool fused_loss) {
  const Device device(t.device);
  const auto c = examples::make_fit_candidate<nn::GPT>(
      t, [&] { return std::make_shared<nn::GPT>(config); }, [](nn::GPT& gpt) { return sharding_units(gpt); });
  const std::vector<int64_t> sizes = examples::micro_batch_sizes(c->batch, t.accum_steps);
  const std::optional<DType> precision = examples::autocast_dtype(t);
  const int64_t T = config.block_size;
  c->plan([&] {
    const Batch b = make_batch(ids, std::vector<size_t>(static_cast<size_t>(sizes.front()), 0), T, device);
    return batch_loss(*c->model, b.x, b.y, fused_loss, precision);
  });
  return [c, sizes, precision, fused_loss, &ids, device, T] {
    std::vector<Batch> micro;
    for (int64_t b : sizes) micro.push_back(make_batch(ids, std::vector<size_t>(static_cast<size_t>(b), 0), T, device));
    c->acc->step<Batch>(
        micro, [](const Batch& b) { return b.y.numel(); },
        [&](const Batch& b) { return batch_loss(*c->model, b.x, b.y, fused_loss, precision); });
  };
}

int run(const Options& o, const CLI::App& app, examples::Distributed& dist, int argc, char** argv) {
  examples::check_fit_options(o.train, o.fit);
  const Device device(o.train.device);
  const std::optional<DType> precision = examples::autocast_dtype(o.train);  // --precision
  manual_seed(o.train.seed);
  examples::apply_runtime_options(o.train);

  // ---- data ----
  const std::string text = o.text_file.empty() ? nn::load_fortunes(o.corpus_dir) : read_text_file(o.text_file);
  const std::string source = o.text_file.empty() ? o.corpus_dir : o.text_file;
  const Vocab vocab = Vocab::of(text);
  std::string train_text, val_text;
  if (o.text_file.empty()) split_corpus(text, train_text, val_text);
  else split_tail(text, train_text, val_text);
  const std::vector<int32_t> train_ids = vocab.encode(train_text), val_ids = vocab.encode(val_text);
  const double entropy = unigram_entropy(train_text);
  std::printf("corpus: %zu characters from %s (train %zu, val %zu)\n", text.size(), source.c_str(),
              train_text.size(), val_text.size());
  std::printf("vocab size: %lld\n", static_cast<long long>(vocab.size()));
  std::printf("unigram entropy: %.4f nats\n", entropy);

  // ---- model ----
  nn::GPTConfig config;
  config.vocab_size = vocab.size();
  config.n_layer = o.n_layer;
  config.n_head = o.n_head;
  config.n_embd = o.n_embd;
  config.block_size = o.block_size;
  config.dropout = o.dropout;
  if (!o.preset.empty()) apply_preset(o.preset, config);
  nn::Metadata loaded_meta;
  nn::TensorDict loaded;
  if (!o.train.load.empty()) {
    loaded = nn::load_safetensors(o.train.load, Device::cpu(), &loaded_meta);
    if (loaded_meta.count("reel.format")) {  // a --checkpoint-dir checkpoint: its model's tensors, verified
      const nn::CheckpointFolder::Loaded c = nn::CheckpointFolder::load(o.train.load);
      REEL_CHECK(!c.metadata.count("run.parts"), "--load '", o.train.load, "': a sharded run's checkpoint (--zero ",
                 "2/3) holds its model in parts; resume it with --resume, or --save the trained model");
      loaded.clear();
      for (const auto& [name, t] : c.tensors)
        if (name.rfind("model.", 0) == 0) loaded[name.substr(6)] = t;
    }
    const auto it = loaded_meta.find("vocab");
    REEL_CHECK(it != loaded_meta.end(), "'", o.train.load, "' has no 'vocab' in its metadata: not a char_gpt file");
    check_vocab(Vocab::parse(it->second, o.train.load), vocab, o.train.load, source);
    config_from_metadata(loaded_meta, o.train.load, app, config);
  }
  const int64_t T = config.block_size;
  REEL_CHECK(static_cast<int64_t>(val_ids.size()) > T + 1 && static_cast<int64_t>(train_ids.size()) > T + 1,
             "the corpus is too small for --block-size ", T, ": train ", train_ids.size(), " and val ",
             val_ids.size(), " characters");
  if (!o.fit.empty())  // no model made here: each candidate makes its own on meta
    return examples::run_fit(o.train, o.fit, config.n_layer, static_cast<double>(o.train.batch * T), "tokens",
                             [&](const examples::TrainOptions& t) { return fit_step(t, config, train_ids, o.fused_loss); },
                             argc, argv);
  // On a device the model is made there (on meta no host bytes: a 1.5B-parameter dry run fits any
  // host), its initialisers run (on meta: recorded) as launches; the same values as made on the host
  // (Philox numbers are a function of seed, offset and index alone). A model to --load is made on
  // the host, where the file's tensors are.
  std::optional<DeviceScope> made_on;
  if (device.is_meta() || (!device.is_cpu() && o.train.load.empty())) made_on.emplace(device);
  nn::GPT gpt(config);
  made_on.reset();
  if (!o.train.load.empty()) {
    gpt.load_state_dict(loaded);
    loaded.clear();
    std::printf("loaded: %s\n", o.train.load.c_str());
  }
  gpt.to(device);
  gpt.set_checkpoint(nn::CheckpointPolicy::parse(o.train.checkpoint));
  examples::apply_offload(gpt, o.train, device);
  std::printf("model: n_layer %lld, n_head %lld, n_embd %lld, block_size %lld: %.3fM parameters on %s, %d cpu "
              "threads\n",
              static_cast<long long>(config.n_layer), static_cast<long long>(config.n_head),
              static_cast<long long>(config.n_embd), static_cast<long long>(T),
              static_cast<double>(gpt.num_parameters()) / 1e6, o.train.device.c_str(), omp_get_max_threads());

  // ---- training ----
  const int64_t steps = o.train.max_steps;
  double val_loss = 0;
  if (steps > 0) {
    // --dist: rank 0's weights everywhere; each rank takes its share of every window's sequences.
    // --zero 2/3 shard by each Linear, LayerNorm and wpe (wte, read again by the tied head, stays in the
    // root), or under --fsdp-units block by block (the tied embeddings and the final norm form the root unit).
    const examples::FitUnits units = sharding_units(gpt);
    std::unique_ptr<optim::Optimizer> opt =
        dist.make_optimizer(o.train.optimizer, gpt, units.blocks, o.train.lr, units.keep_whole);
    const std::unique_ptr<optim::LrSchedule> schedule = examples::make_schedule(o.train, steps);
    const std::unique_ptr<optim::GradScaler> scaler = examples::make_scaler(o.train);  // f16 only
    optim::Accumulator acc(*opt, {o.train.clip, schedule.get(), o.train.skip_nonfinite, dist.sync(), scaler.get()});
    // --cuda-graph: the window captured once after the warm-up windows and replayed (optim/graphed_window.h),
    // reading the micro-batches' upload slots (below), which keep their addresses.
    std::optional<optim::GraphedWindow> graphed;
    if (o.train.cuda_graph) graphed.emplace(acc);
    std::optional<autograd::DetectAnomaly> detect_anomaly;
    if (o.train.detect_anomaly) detect_anomaly.emplace();
    const int64_t my_batch = static_cast<int64_t>(dist.share(o.train.batch).size());
    REEL_CHECK(my_batch > 0, "--batch ", o.train.batch, " is smaller than the ", dist.world(), " ranks");
    const std::vector<int64_t> sizes = examples::micro_batch_sizes(my_batch, o.train.accum_steps);
    std::printf("training: %lld steps of %lld sequences x %lld characters (%lld micro-batches), %s, lr %g (%s), "
                "checkpoint %s, %s\n",
                static_cast<long long>(steps), static_cast<long long>(o.train.batch), static_cast<long long>(T),
                static_cast<long long>(sizes.size()), o.train.optimizer.c_str(), o.train.lr,
                o.train.schedule.c_str(), o.train.checkpoint.c_str(), examples::precision_str(o.train).c_str());
    if (o.train.dist)
      std::printf("data parallel: %d ranks, %lld sequences each per step%s\n", dist.world(),
                  static_cast<long long>(my_batch), dist.sharding());
    std::fflush(stdout);

    std::mt19937_64 rng(o.train.seed + 1000003 * static_cast<uint64_t>(dist.rank()));  // each rank its own windows
    std::uniform_int_distribution<size_t> pick(0, train_ids.size() - static_cast<size_t>(T) - 1);
    const autograd::CheckpointPlan* budget_plan = examples::plan_checkpoint_budget(gpt, [&] {
      const Batch b = make_batch(train_ids, std::vector<size_t>(static_cast<size_t>(sizes.front()), 0), T, device);
      return batch_loss(gpt, b.x, b.y, o.fused_loss, precision);  // one micro-batch: only its shapes matter
    });
    // --resume: the whole state of the run as it was after `done` steps (the windows' stream, `rng`,
    // included), put back just before the loop, after everything above that draws random streams.
    examples::RunCheckpoints checkpoints(o.train, "char_gpt", dist, /*data_per_rank*/ true);
    nn::Metadata resumed;
    const int64_t done = checkpoints.resume(gpt, *opt, scaler.get(), acc, &resumed);
    if (done > 0) {
      std::istringstream state(resumed.at("data.rng"));
      state >> rng;
      REEL_CHECK(!state.fail(), "resume: the windows' random stream in the checkpoint does not read back");
      if (done >= steps)
        std::printf("resume: the run finished at step %lld of %lld: nothing left to do\n", static_cast<long long>(done),
                    static_cast<long long>(steps));
    }
    const nn::Metadata model_meta = model_metadata(config, vocab, corpus_hash(text));  // hashed once
    const auto run_metadata = [&] {
      std::ostringstream state;
      state << rng;
      nn::Metadata m = model_meta;
      m["data.rng"] = state.str();
      return m;
    };
    reset_peak_memory(device);
    examples::Progress progress(steps, "tokens", o.train.quiet, done);
    examples::MetricsLog metrics(o.train.metrics, done, "tokens");
    double train_seconds = 0;
    int64_t tokens = 0;
    examples::StepProfiler profiler(o.train, "tokens", static_cast<double>(o.train.batch * T));
    examples::StepMemoryTimeline memory_timeline(o.train, device, "char_gpt");
    examples::BatchUpload upload;  // the micro-batches' (2, b, T) device tensors, one per micro-batch
    for (int64_t step = done + 1; step <= steps; ++step) {
      profiler.before_step(step);
      memory_timeline.before_step(step);
      const auto t0 = std::chrono::steady_clock::now();
      std::vector<Batch> micro;
      for (int64_t b : sizes) {
        std::vector<size_t> starts(static_cast<size_t>(b));
        for (size_t& s : starts) s = pick(rng);
        micro.push_back(make_batch(train_ids, starts, T, device, &upload, micro.size()));
      }
      const auto count = [](const Batch& b) { return b.y.numel(); };
      const auto loss = [&](const Batch& b) { return batch_loss(gpt, b.x, b.y, o.fused_loss, precision); };
      // The micro-batches are `upload`'s slots, whose addresses stay: the graph's static inputs.
      const optim::WindowResult r = graphed ? graphed->step<Batch>(micro, count, loss) : acc.step<Batch>(micro, count, loss);
      const double step_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      train_seconds += step_seconds;
      tokens += r.count;
      metrics.log(step, r, step_seconds, memory_stats(device).peak_bytes);
      progress.update(step, r.loss, tokens);
      profiler.after_step(step);
      memory_timeline.after_step(step);
      checkpoints.after_step(step, steps, gpt, *opt, scaler.get(), acc, run_metadata);
      if (checkpoints.stop_after(step)) break;
      if (step % o.eval_every == 0 && step < steps) {
        progress.finish();
        val_loss = evaluate(gpt, val_ids, T, o.eval_windows, device, o.fused_loss, precision);
        std::printf("step %lld/%lld  train loss %.4f  val loss: %.4f  lr %.2e  %.0f tokens/s\n",
                    static_cast<long long>(step), static_cast<long long>(steps), r.loss.get(), val_loss, r.lr,
                    static_cast<double>(tokens) / train_seconds);
        std::fflush(stdout);
      }
    }
    progress.finish();
    profiler.finish();
    memory_timeline.finish();
    metrics.finish("char_gpt: training loss");
    std::printf("trained: %lld steps, %lld tokens in %.1f s\n", static_cast<long long>(steps),
                static_cast<long long>(tokens), train_seconds);
    examples::report_skipped(acc, scaler.get());
    checkpoints.report();
    examples::report_rate("tokens", static_cast<double>(tokens), train_seconds, device, profiler.predicted_rate(),
                          profiler.predicted_on());
    dist.report(steps, device);
    dist.finish_training();
    examples::report_checkpoint_budget(budget_plan, device);
  }

  // ---- evaluation ----
  val_loss = evaluate(gpt, val_ids, T, o.eval_windows, device, o.fused_loss, precision);
  std::printf("val loss: %.4f (unigram entropy %.4f nats, %.4f below)\n", val_loss, entropy, entropy - val_loss);
  const std::string hash = corpus_hash(text);
  if (!o.train.load.empty() && steps == 0) {
    // Comparable only when the file was evaluated on the same windows of the same text.
    auto meta_is = [&](const char* key, const std::string& value) {
      const auto it = loaded_meta.find(key);
      return it != loaded_meta.end() && it->second == value;
    };
    const auto saved = loaded_meta.find("val_loss");
    const bool same_windows = meta_is("corpus", hash) && meta_is("eval_windows", std::to_string(o.eval_windows));
    if (saved != loaded_meta.end() && same_windows) {
      const double expected = std::stod(saved->second);
      REEL_CHECK(std::abs(val_loss - expected) <= 1e-3 * std::max(1.0, expected), "the loaded model's val loss ",
                 val_loss, " differs from the ", expected, " recorded when '", o.train.load, "' was saved");
      std::printf("val loss matches the saved model's: %.4f\n", expected);
    }
  }
  if (!o.train.save.empty()) {
    nn::Metadata meta = model_metadata(config, vocab, hash);
    meta["val_loss"] = std::to_string(val_loss);
    meta["eval_windows"] = std::to_string(o.eval_windows);
    nn::save(gpt, o.train.save, meta);
    std::printf("saved: %s\n", o.train.save.c_str());
  }

  // ---- sampling ----
  if (o.sample_chars > 0) {
    Generator gen(o.train.seed);
    const std::vector<int64_t> ids =
        gpt.generate({vocab.lookup[static_cast<unsigned char>('\n')]}, o.sample_chars, o.temperature, o.top_k, &gen);
    std::string sample;
    for (size_t i = 1; i < ids.size(); ++i) sample += static_cast<char>(vocab.chars[static_cast<size_t>(ids[i])]);
    std::printf("---- sample (%lld characters, temperature %g, top-k %lld) ----\n%s\n----\n",
                static_cast<long long>(o.sample_chars), o.temperature, static_cast<long long>(o.top_k),
                sample.c_str());
  }

  std::printf("%s", memory_report().c_str());
  if (app.count("--min-gain") > 0 && entropy - val_loss < o.min_gain) {
    std::fflush(stdout);
    std::fprintf(stderr, "char_gpt: val loss %.4f is not %.4f nats below the unigram entropy %.4f\n", val_loss,
                 o.min_gain, entropy);
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  o.train.batch = 32;
  o.train.max_steps = 1500;
  o.train.optimizer = "adamw";
  o.train.lr = 4e-3;
  o.train.schedule = "cosine";
  o.train.warmup = 20;
  o.train.clip = 1.0;
  CLI::App app{"Trains a character-level GPT on the fortune cookie files, then samples from it."};
  examples::add_train_options(app, o.train);
  app.remove_option(app.get_option("--epochs"));  // random windows: the run is --max-steps long
  app.get_option("--batch")->description("sequences per optimizer step (split over --accum-steps micro-batches)");
  app.get_option("--max-steps")->description("optimizer steps (0: no training; with --load, evaluate and sample)");
  app.add_option("--n-layer", o.n_layer, "transformer blocks")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--preset", o.preset,
                 "GPT-2's shapes instead of --n-layer/--n-head/--n-embd/--block-size: gpt2 (124M), gpt2-medium "
                 "(350M), gpt2-large (774M) or gpt2-xl (1.5B); vocabulary 50,257, context 1,024, tied head. With "
                 "--device meta a dry run: memory and predicted step without a GPU")
      ->check(CLI::IsMember({"gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl"}));
  app.add_option("--n-head", o.n_head, "attention heads (must divide --n-embd)")
      ->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--n-embd", o.n_embd, "embedding width")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--block-size", o.block_size, "context length in characters")
      ->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--dropout", o.dropout, "dropout on embeddings, attention and MLP outputs")
      ->capture_default_str()->check(CLI::Range(0.0, 0.9));
  app.add_option("--eval-every", o.eval_every, "validation loss every this many steps (and at the end)")
      ->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--eval-windows", o.eval_windows, "validation windows of --block-size characters (fixed positions)")
      ->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--sample-chars", o.sample_chars, "characters to sample after training (0: none)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--temperature", o.temperature, "sampling temperature")->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--top-k", o.top_k, "sample among the k most likely characters (0: all)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--text", o.text_file,
                 "train on this UTF-8 text file instead of the fortunes (its last tenth is the validation split)");
  app.add_option("--corpus-dir", o.corpus_dir, "directory of fortune files (Debian package fortunes)")
      ->capture_default_str();
  app.add_option("--min-gain", o.min_gain,
                 "exit 1 unless the final val loss is at least this many nats below the unigram entropy");
  app.add_flag("--fused-loss", o.fused_loss,
               "LM head and cross-entropy fused and chunked (GPT::loss): the tape keeps no (B, T, V) logits gradient");
  examples::add_fit_option(app, o.fit, o.train);
  CLI11_PARSE(app, argc, argv);
  try {
    examples::Distributed dist(o.train);
    return run(o, app, dist, argc, argv);
  } catch (const std::exception& e) {
    return examples::report_error("char_gpt", e);
  }
}
