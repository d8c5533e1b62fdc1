// gpt_text.h — the GPT example's data: a text as bytes, split 90/10 into training and
// validation, cut into windows of tokens and next-byte targets (examples/gpt.cpp).
//
// By default the text is every file of Debian's `fortunes` package, concatenated in name
// order; --data FILE gives any text. A byte is a token, so any text works.
#pragma once

#include <ringgrad/ringgrad.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

inline std::vector<std::string> default_data_files() {
  const std::filesystem::path dir = "/usr/share/games/fortunes";
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string ext = entry.path().extension().string();
    if (entry.is_regular_file() && ext.empty()) files.push_back(entry.path().string());
  }
  RG_CHECK(!files.empty(), "gpt", "expected the fortune files in ", dir.string(),
           " (install Debian's `fortunes` package: scripts/setup does), or give --data FILE");
  std::sort(files.begin(), files.end());
  return files;
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  RG_CHECK(in.good(), "gpt", "cannot open --data file '", path, "'");
  return std::string(std::istreambuf_iterator<char>(in), {});
}

struct Text {
  std::string train, val;
};

inline Text load_text(const std::string& data, int64_t seq) {
  std::string all;
  for (const std::string& f : data.empty() ? default_data_files() : std::vector{data})
    all += read_file(f);
  const size_t split = all.size() * 9 / 10;
  Text t{all.substr(0, split), all.substr(split)};
  RG_CHECK(static_cast<int64_t>(t.val.size()) > seq + 1, "gpt", "expected a text long enough for "
           "a validation window of --seq ", seq, " (10% of it), got ", all.size(), " bytes from ",
           data.empty() ? "the fortune files" : "'" + data + "'");
  return t;
}

// Entropy of the byte frequencies (nats/char): the loss of a model without context.
inline double unigram_loss(const std::string& text) {
  std::array<double, 256> count{};
  for (unsigned char c : text) count[c] += 1;
  double h = 0;
  for (double n : count)
    if (n > 0) h -= n / double(text.size()) * std::log(n / double(text.size()));
  return h;
}

// `rows` windows of seq + 1 bytes from `text`, starting at `starts`: the tokens and,
// one byte on, the targets, each (rows, seq) int64.
inline std::pair<ringgrad::Tensor, ringgrad::Tensor> windows(const std::string& text, const std::vector<size_t>& starts,
                                          int64_t seq) {
  std::vector<int64_t> x, y;
  for (size_t s : starts)
    for (int64_t i = 0; i < seq; ++i) {
      x.push_back(static_cast<unsigned char>(text[s + i]));
      y.push_back(static_cast<unsigned char>(text[s + i + 1]));
    }
  const int64_t rows = static_cast<int64_t>(starts.size());
  return {ringgrad::from_vector(x, {rows, seq}), ringgrad::from_vector(y, {rows, seq})};
}
