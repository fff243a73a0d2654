// The measured choice tables (src/cuda/heuristic_sm*.txt): every kernel they name is a valid
// config, and a default build compiles all of them for the dtypes and head dims it was given.
#include <doctest/doctest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "flashattn.h"

namespace {

struct Row {
  std::string kind, config;
  int head_dim = 0, head_dim_v = 0, causal = 0;  // head dims written "192" or "192:128"
  long long max_seqlen = 0;
};

std::vector<std::string> split(std::string const& text, char sep) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, sep);) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

std::vector<Row> read_table(std::string const& path) {
  std::ifstream in(path);
  REQUIRE_MESSAGE(in.good(), "cannot read " << path);
  std::vector<Row> rows;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    size_t bar = line.find(" | ");
    REQUIRE_MESSAGE(bar != std::string::npos, line);
    Row r;
    std::istringstream fields(line.substr(0, bar));
    std::string dims;
    fields >> r.kind >> dims >> r.causal;
    size_t const colon = dims.find(':');
    r.head_dim = std::stoi(dims.substr(0, colon));
    r.head_dim_v = colon == std::string::npos ? r.head_dim : std::stoi(dims.substr(colon + 1));
    REQUIRE_MESSAGE(r.head_dim_v <= r.head_dim, line);
    if (r.kind == "pick" || r.kind == "fallback" || r.kind == "pad") fields >> r.max_seqlen;
    r.config = line.substr(bar + 3);
    REQUIRE_MESSAGE((r.kind == "pick" || r.kind == "fallback" || r.kind == "candidate" ||
                     r.kind == "pad"),
                    line);
    REQUIRE_MESSAGE((r.kind != "pad" || r.head_dim_v == r.head_dim), line);
    rows.push_back(r);
  }
  return rows;
}

}  // namespace

TEST_SUITE("choice") {

TEST_CASE("choice tables name valid kernels, each (head dims, causal) covered in length order") {
  std::vector<std::string> tables = split(FA_CHOICE_TABLES, ',');
  REQUIRE(!tables.empty());
  for (std::string const& path : tables) {
    std::vector<Row> rows = read_table(path);
    REQUIRE(!rows.empty());
    for (size_t i = 0; i < rows.size(); ++i) {
      Row const& r = rows[i];
      INFO(path << ": " << r.kind << " " << r.head_dim << ":" << r.head_dim_v << " " << r.causal
                << " | " << r.config);
      for (char const* dtype : {"FP16", "BF16"}) {
        fa_kernel_config kc;
        REQUIRE(fa_kernel_config_init(&kc) == FA_STATUS_SUCCESS);
        std::string name = std::string("(") + dtype + ", " + r.config;
        REQUIRE(fa_kernel_config_parse(name.c_str(), &kc) == FA_STATUS_SUCCESS);
        CHECK(fa_kernel_config_validate(&kc) == FA_STATUS_SUCCESS);
        CHECK(kc.d_head == r.head_dim);
        // The default set is built from these tables: every named kernel of a built dtype and head
        // dim must be in the registry.
        std::string const dtype_option = dtype[0] == 'F' ? "fp16" : "bf16";
        // A build of sm_90a alone holds no mma.sync prefill tile (FA_MMA_SYNC_SM90=decode).
        bool const decode_tile = kc.B_r == 64 && kc.n_warps == 4;
        bool const built = (std::string(FA_KERNEL_SET_NAME) == "default" ||
                            std::string(FA_KERNEL_SET_NAME) == "all") &&
                           (kc.family != FA_FAMILY_SM90 || FA_SM90_BUILT) &&
                           (kc.family != FA_FAMILY_MMA_SYNC || decode_tile ||
                            FA_MMA_SYNC_PREFILL_BUILT);
        bool wanted = false;
        for (std::string const& d : split(FA_BUILT_DTYPES, ',')) wanted |= d == dtype_option;
        bool head_dim_built = false;
        for (std::string const& d : split(FA_BUILT_HEAD_DIMS, ',')) {
          head_dim_built |= std::stoi(d) == r.head_dim;
        }
        if (built && wanted && head_dim_built) {
          int registered = 0;
          REQUIRE(fa_kernel_is_registered(&kc, &registered) == FA_STATUS_SUCCESS);
          CHECK(registered == 1);
        }
      }
      if (r.kind != "candidate" && i > 0 && rows[i - 1].kind == r.kind &&
          rows[i - 1].head_dim == r.head_dim && rows[i - 1].head_dim_v == r.head_dim_v &&
          rows[i - 1].causal == r.causal) {
        CHECK(rows[i - 1].max_seqlen < r.max_seqlen);
      }
      // A fallback stands in where the sm90 family cannot run: it is of the mma.sync family.
      if (r.kind == "fallback") CHECK(r.config.find("sm90") == std::string::npos);
      // A pad row's kernel is one the table already names for its head dims (a pick or a
      // candidate of either mask): the pad rows choose which carry the narrow pairs, and add
      // no kernel to the build.
      if (r.kind == "pad") {
        bool named = false;
        for (Row const& other : rows) {
          named |= (other.kind == "pick" || other.kind == "candidate") &&
                   other.head_dim == r.head_dim && other.head_dim_v == r.head_dim_v &&
                   other.config == r.config;
        }
        CHECK(named);
      }
    }
  }
}

}  // TEST_SUITE
