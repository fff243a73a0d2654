#include "core/kernel_config.hpp"

#include <cstdint>

#include "core/family_config.hpp"
#include "core/kernel_config_text.hpp"
#include "core/text.hpp"

namespace fa {

namespace {

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    char x = a[i] >= 'a' && a[i] <= 'z' ? char(a[i] - 32) : a[i];
    char y = b[i] >= 'a' && b[i] <= 'z' ? char(b[i] - 32) : b[i];
    if (x != y) return false;
  }
  return true;
}

// The family whose name has no tag (mma.sync): a config of a family the library does not know
// is named, parsed and filtered in its form.
FamilyConfig const& untagged_family() {
  for (FamilyConfig const* f : family_configs()) {
    if (f->tag == nullptr) return *f;
  }
  return *family_configs().front();  // unreached: tools/generate_kernels.py checks there is one
}

// The family whose form names `c`: its own when it is tagged, else the untagged one's.
FamilyConfig const& name_form(KernelConfig const& c) {
  FamilyConfig const* f = find_family_config(c.family);
  return f != nullptr && f->tag != nullptr ? *f : untagged_family();
}

}  // namespace

FamilyConfig const* find_family_config(int32_t family) {
  for (FamilyConfig const* f : family_configs()) {
    if (f->id == family) return f;
  }
  return nullptr;
}

int64_t KernelConfig::smem_bytes() const {
  FamilyConfig const* f = find_family_config(family);
  return f != nullptr ? f->smem_bytes(*this) : 0;
}

KernelConfig canonical(KernelConfig c) {
  FamilyConfig const* f = find_family_config(c.family);
  return f != nullptr ? f->canonical(c) : c;
}

char const* dtype_name(DType t) {
  switch (t) {
    case DType::kFP16: return "FP16";
    case DType::kBF16: return "BF16";
    case DType::kFP32: return "FP32";
    case DType::kE4M3: return "E4M3";
  }
  return "?";
}

std::string validate(KernelConfig const& c) {
  if (!rules::fields_in_range(c)) {
    return fmt("d_head = %d, B_r = %d, B_c = %d, n_warps = %d, stages = %d and the load tiles "
               "(%d, %d, %d) must each lie in [0, 65536]",
               c.d_head, c.B_r, c.B_c, c.n_warps, c.stages, c.Q_mma_load_K_tiles,
               c.K_mma_load_K_tiles, c.V_mma_load_K_tiles);
  }
  FamilyConfig const* family = find_family_config(c.family);
  if (family == nullptr) {
    // "0 (mma.sync) or 1 (sm90)"
    std::string known;
    std::span<FamilyConfig const* const> all = family_configs();
    for (size_t i = 0; i < all.size(); ++i) {
      known += i == 0 ? "" : i + 1 == all.size() ? " or " : ", ";
      known += fmt("%d (%s)", all[i]->id, all[i]->name);
    }
    return fmt("family = %d must be %s", c.family, known.c_str());
  }
  if (!rules::dtype_ok(c))
    return fmt("dtype = %d must be FP16 (%d), BF16 (%d) or E4M3 (%d)", int(c.dtype),
               int(DType::kFP16), int(DType::kBF16), int(DType::kE4M3));
  if (!rules::d_head_ok(c))
    return fmt("d_head = %d must be a multiple of 64 (the swizzle tile width) in [64, 256]", c.d_head);
  for (FamilyConfig const* other : family_configs()) {
    if (other == family) continue;
    if (std::string why = other->knobs_unset(c, family->name); !why.empty()) return why;
  }
  return family->validate(c);
}

std::string autotune_filter(KernelConfig const& c) { return name_form(c).autotune_filter(c); }

// "(BF16, 128, 128, 64, 4): " then, for a tagged family, its tag and knobs ("sm90+stages_2"); for
// the untagged one, or a family the library does not know ("family_7"), the knobs every tagged
// family has set ("stages_2") before the untagged family's ("async+...+load_2_2_0_tiles").
std::string short_name(KernelConfig const& c) {
  std::vector<std::string> tokens;
  FamilyConfig const& form = name_form(c);
  if (form.tag != nullptr) {
    tokens.push_back(form.tag);
  } else {
    if (find_family_config(c.family) == nullptr) tokens.push_back(fmt("family_%d", c.family));
    for (FamilyConfig const* other : family_configs()) {
      if (other != &form) other->name_tokens(c, false, tokens);
    }
  }
  form.name_tokens(c, true, tokens);
  std::string s = fmt("(%s, %d, %d, %d, %d): ", dtype_name(c.dtype), c.d_head, c.B_r, c.B_c, c.n_warps);
  for (size_t i = 0; i < tokens.size(); ++i) s += (i == 0 ? "" : "+") + tokens[i];
  return s;
}

bool parse_short_name(std::string_view text, KernelConfig* out, std::string* error) {
  // A Markdown table row ("| (BF16, ...): ... | 512.3 |") parses from its first non-empty cell.
  for (std::string_view cell : split(text, '|')) {
    if (!trim(cell).empty()) {
      text = trim(cell);
      break;
    }
  }
  size_t open = text.find('(');
  size_t close = text.find("):");
  if (open != 0 || close == std::string_view::npos) {
    *error = "expected \"(<dtype>, <d_head>, <B_r>, <B_c>, <n_warps>): <features>\", got \"" +
             std::string(text) + "\"";
    return false;
  }
  std::vector<std::string_view> head = split(text.substr(1, close - 1), ',');
  if (head.size() != 5) {
    *error = fmt("expected 5 comma-separated values in parentheses, got %zu", head.size());
    return false;
  }
  KernelConfig c{};
  std::string_view dt = trim(head[0]);
  if (iequals(dt, "FP16") || dt == "5") {  // 5 and 15: the seed's torch::ScalarType codes
    c.dtype = DType::kFP16;
  } else if (iequals(dt, "BF16") || dt == "15") {
    c.dtype = DType::kBF16;
  } else if (iequals(dt, "E4M3")) {
    c.dtype = DType::kE4M3;
  } else {
    *error = "unknown dtype \"" + std::string(dt) + "\" (expected FP16, BF16 or E4M3)";
    return false;
  }
  int32_t* ints[4] = {&c.d_head, &c.B_r, &c.B_c, &c.n_warps};
  char const* int_names[4] = {"d_head", "B_r", "B_c", "n_warps"};
  for (int i = 0; i < 4; ++i) {
    if (!parse_int(head[i + 1], ints[i])) {
      *error = std::string(int_names[i]) + " is not an integer: \"" + std::string(trim(head[i + 1])) +
               "\"";
      return false;
    }
  }
  // Which families' knob tokens and required tokens the name has, by index in family_configs().
  std::span<FamilyConfig const* const> families = family_configs();
  std::vector<bool> knobs(families.size()), required(families.size());
  for (std::string_view token : split(text.substr(close + 2), '+')) {
    token = trim(token);
    if (token.starts_with("family_")) {
      if (!parse_int(token.substr(7), &c.family)) {
        *error = "malformed family token \"" + std::string(token) + "\" (expected family_<N>)";
        return false;
      }
      continue;
    }
    Token read = Token::kNotMine;
    for (size_t i = 0; i < families.size() && read == Token::kNotMine; ++i) {
      if (families[i]->tag != nullptr && token == families[i]->tag) {
        c.family = families[i]->id;
        read = Token::kKnob;
        continue;
      }
      read = families[i]->parse_token(token, &c, error);
      if (read == Token::kMalformed) return false;
      knobs[i] = knobs[i] || read != Token::kNotMine;
      required[i] = required[i] || read == Token::kRequired;
    }
    if (read == Token::kNotMine) {
      *error = "unknown feature \"" + std::string(token) + "\"";
      return false;
    }
  }
  // A tagged family's name carries its knobs alone; the untagged form's may carry any family's.
  FamilyConfig const& form = name_form(c);
  for (size_t i = 0; i < families.size(); ++i) {
    if (form.tag != nullptr && families[i] != &form && knobs[i]) {
      *error = std::string(form.a_kernel) + " has no " + families[i]->name + " features (" +
               families[i]->knob_tokens + ")";
      return false;
    }
    if (families[i] == &form && form.required_token != nullptr && !required[i]) {
      *error = std::string("missing the ") + form.required_token + " feature";
      return false;
    }
  }
  *out = c;
  return true;
}

}  // namespace fa
