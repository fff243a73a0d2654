/*
 * libflashattn for C++17: a header-only layer over the C API of flashattn.h, which stays the manual
 * for every behaviour (shapes, strides, alignment, streams, thread safety, each status). This layer
 * adds ownership and types, nothing else:
 *   - flashattn::Context and flashattn::Plan own a fa_context_t / fa_plan_t: move-only, freed by
 *     their destructors;
 *   - a failing call throws flashattn::Error, which carries the fa_status and the detail message
 *     (fa_last_error_detail() of the failing thread, copied at the throw);
 *   - flashattn::Tensor<T> describes one [batch, seq, heads, head_dim] tensor with its element type,
 *     so the dtype and the shape fields of fa_config come from the tensors themselves.
 * It needs no CUDA header: streams are fa_stream_t (cast a cudaStream_t to it). Exceptions stop
 * here: none crosses into the C library, which never throws. Since 0.3.0.
 * SPDX-License-Identifier: MIT OR Apache-2.0
 */
#ifndef FLASHATTN_HPP
#define FLASHATTN_HPP

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "flashattn.h"

namespace flashattn {

/*! Error : what every failing call throws. what() reads "FA_STATUS_...: <summary>: <detail>".
 *  Since 0.3.0. */
class Error : public std::runtime_error {
 public:
  Error(fa_status status, std::string detail)
      : std::runtime_error(std::string(fa_status_string(status)) + ": " + detail),
        status_(status),
        detail_(std::move(detail)) {}
  /*! The C API's status (never FA_STATUS_SUCCESS). */
  fa_status status() const noexcept { return status_; }
  /*! The library's detail message for the failure (names the offending value). */
  std::string const& detail() const noexcept { return detail_; }

 private:
  fa_status status_;
  std::string detail_;
};

/*! check() : throws Error(status, fa_last_error_detail()) unless status is FA_STATUS_SUCCESS.
 *  Call it right after the C call, on the same thread (the detail is per thread). Since 0.3.0. */
inline void check(fa_status status) {
  if (status != FA_STATUS_SUCCESS) throw Error(status, fa_last_error_detail());
}

/*! The 16-bit element types, as storage: C++17 has neither, and the library only needs their bits
 *  (IEEE binary16 and bfloat16). Since 0.3.0. */
struct fp16 {
  std::uint16_t bits;
};
struct bf16 {
  std::uint16_t bits;
};

/*! dtype_of<T>::value : the fa_dtype of element type T (fp16, bf16, float). Specialise it for an
 *  application's own 16-bit types of the same layout. Since 0.3.0. */
template <class T>
struct dtype_of;
template <>
struct dtype_of<fp16> : std::integral_constant<fa_dtype, FA_DTYPE_FP16> {};
template <>
struct dtype_of<bf16> : std::integral_constant<fa_dtype, FA_DTYPE_BF16> {};
template <>
struct dtype_of<float> : std::integral_constant<fa_dtype, FA_DTYPE_FP32> {};
template <class T>
inline constexpr fa_dtype dtype_of_v = dtype_of<std::remove_const_t<T>>::value;

/*! Tensor<T> : a view (not an owner) of a [batch, seq, heads, head_dim] tensor of T, the last
 *  dimension contiguous, the others at the given strides in elements (all three 0: packed, as in
 *  fa_config). T is const for inputs. Host memory on a CPU context, device memory on a GPU one.
 *  Since 0.3.0. */
template <class T>
struct Tensor {
  T* data = nullptr;
  std::int64_t batch = 0, seq = 0, heads = 0, head_dim = 0;
  std::int64_t batch_stride = 0, seq_stride = 0, head_stride = 0;

  /*! A packed tensor: strides seq * heads * head_dim, heads * head_dim, head_dim. */
  static Tensor packed(T* data, std::int64_t batch, std::int64_t seq, std::int64_t heads,
                       std::int64_t head_dim) {
    return Tensor{data, batch, seq, heads, head_dim, 0, 0, 0};
  }
  /*! The same view with read-only elements (what the inputs take). */
  template <class U = T, class = std::enable_if_t<!std::is_const_v<U>>>
  operator Tensor<U const>() const {
    return Tensor<U const>{data, batch, seq, heads, head_dim, batch_stride, seq_stride, head_stride};
  }
};

namespace detail {
// Keeps T out of deduction: the output tensor decides it, and the inputs convert to const.
template <class T>
struct nondeduced {
  using type = T;
};
}  // namespace detail

/*! Input<T> : the read-only tensor an input of element type T takes; a Tensor<T> converts to it.
 *  Since 0.3.0. */
template <class T>
using Input = Tensor<typename detail::nondeduced<T>::type const>;

/*! Config : a fa_config (fa_config_init()'s defaults) with typed setters; raw() gives the struct
 *  for the fields these do not cover (layouts, ALiBi, sinks, splits: see fa_config).
 *  Since 0.3.0. */
class Config {
 public:
  Config() { check(fa_config_init(&config_)); }

  /*! The config of attention from q, k, v into o: dtype, sizes and strides from the tensors.
   *  v's head_dim becomes fa_config.head_dim_v where it differs from q's (left 0 otherwise).
   *  @throws Error(FA_STATUS_INVALID_ARGUMENT) when the shapes disagree (k and v must match but
   *          for head_dim, o must match q but for head_dim, k's head_dim must be q's and o's
   *          v's); the library checks the rest when it runs. */
  template <class T>
  static Config attention(Input<T> const& q, Input<T> const& k, Input<T> const& v,
                          Tensor<T> const& o) {
    if (k.batch != q.batch || v.batch != q.batch || o.batch != q.batch || v.seq != k.seq ||
        v.heads != k.heads || o.seq != q.seq || o.heads != q.heads || k.head_dim != q.head_dim ||
        o.head_dim != v.head_dim) {
      throw Error(FA_STATUS_INVALID_ARGUMENT,
                  "tensor shapes disagree: q " + shape(q) + ", k " + shape(k) + ", v " + shape(v) +
                      ", o " + shape(o) +
                      " (want k and v alike, o like q, k's head_dim q's, o's v's)");
    }
    Config c;
    fa_config& r = c.config_;
    r.dtype = dtype_of_v<T>;
    r.batch = q.batch;
    r.seqlen_q = q.seq;
    r.seqlen_k = k.seq;
    r.heads_q = q.heads;
    r.heads_kv = k.heads;
    r.head_dim = q.head_dim;
    // 0 where the dims agree, so such a config also runs on a library older than head_dim_v.
    r.head_dim_v = v.head_dim != q.head_dim ? v.head_dim : 0;
    r.q_batch_stride = q.batch_stride, r.q_seq_stride = q.seq_stride, r.q_head_stride = q.head_stride;
    r.k_batch_stride = k.batch_stride, r.k_seq_stride = k.seq_stride, r.k_head_stride = k.head_stride;
    r.v_batch_stride = v.batch_stride, r.v_seq_stride = v.seq_stride, r.v_head_stride = v.head_stride;
    r.o_batch_stride = o.batch_stride, r.o_seq_stride = o.seq_stride, r.o_head_stride = o.head_stride;
    return c;
  }

  /*! fa_config.causal (bottom-right aligned). */
  Config& causal(bool on = true) {
    config_.causal = on ? 1 : 0;
    return *this;
  }
  /*! fa_config.softmax_scale (0: 1/sqrt(head_dim)). */
  Config& scale(float s) {
    config_.softmax_scale = s;
    return *this;
  }
  /*! fa_config.window, window_left, window_right (-1: unbounded on that side). */
  Config& window(std::int64_t left, std::int64_t right) {
    config_.window = 1;
    config_.window_left = left;
    config_.window_right = right;
    return *this;
  }
  /*! fa_config.softcap (0: off). */
  Config& softcap(float cap) {
    config_.softcap = cap;
    return *this;
  }
  /*! fa_config_validate(). @throws Error as it fails. */
  Config const& validate() const {
    check(fa_config_validate(&config_));
    return *this;
  }

  fa_config& raw() noexcept { return config_; }
  fa_config const& raw() const noexcept { return config_; }

 private:
  template <class T>
  static std::string shape(Tensor<T> const& t) {
    return "[" + std::to_string(t.batch) + ", " + std::to_string(t.seq) + ", " +
           std::to_string(t.heads) + ", " + std::to_string(t.head_dim) + "]";
  }

  fa_config config_{};
};

/*! Plan : an owned fa_plan_t, made by Context::plan(). Move-only; destroy it before its context.
 *  run() is thread-safe as fa_plan_run() is. Since 0.3.0. */
class Plan {
 public:
  /*! Takes ownership of a plan from fa_plan_create() (or NULL, an empty Plan). */
  explicit Plan(fa_plan_t* plan = nullptr) noexcept : plan_(plan) {}
  Plan(Plan&& other) noexcept : plan_(other.release()) {}
  Plan& operator=(Plan&& other) noexcept {
    if (this != &other) {
      fa_plan_destroy(plan_);
      plan_ = other.release();
    }
    return *this;
  }
  Plan(Plan const&) = delete;
  Plan& operator=(Plan const&) = delete;
  ~Plan() { fa_plan_destroy(plan_); }

  /*! fa_plan_run() on untyped pointers laid out as the plan's config says. */
  void run(void const* q, void const* k, void const* v, void* o, float* lse = nullptr,
           void* workspace = nullptr, std::size_t workspace_size = 0,
           fa_stream_t stream = nullptr) const {
    check(fa_plan_run(plan_, q, k, v, o, lse, workspace, workspace_size, stream));
  }
  /*! fa_plan_run_ex(): with index tensors, per-head parameters and workspace in `args`. */
  void run(void const* q, void const* k, void const* v, void* o, float* lse,
           fa_run_args const& args, fa_stream_t stream = nullptr) const {
    check(fa_plan_run_ex(plan_, q, k, v, o, lse, &args, stream));
  }
  /*! fa_plan_workspace_size(). */
  std::size_t workspace_size() const {
    std::size_t size = 0;
    check(fa_plan_workspace_size(plan_, &size));
    return size;
  }
  /*! fa_plan_num_splits(). */
  int num_splits() const {
    int splits = 0;
    check(fa_plan_num_splits(plan_, &splits));
    return splits;
  }

  fa_plan_t* get() const noexcept { return plan_; }
  /*! Gives up ownership: the caller frees the result with fa_plan_destroy(). */
  fa_plan_t* release() noexcept { return std::exchange(plan_, nullptr); }
  explicit operator bool() const noexcept { return plan_ != nullptr; }

 private:
  fa_plan_t* plan_;
};

/*! Context : an owned fa_context_t on one CUDA device or the CPU. Move-only; safe to share between
 *  threads as fa_context_t is (by reference: the object itself is not copied). Since 0.3.0. */
class Context {
 public:
  /*! fa_context_create(device): a CUDA device ordinal, or FA_DEVICE_CPU.
   *  @throws Error: FA_STATUS_NO_DEVICE (no such device, no driver, or a CPU-only build),
   *          FA_STATUS_ARCH_MISMATCH, FA_STATUS_CUDA_ERROR, ... as fa_context_create(). */
  explicit Context(int device) { check(fa_context_create(device, &ctx_)); }
  /*! A context on the CPU backend. */
  static Context cpu() { return Context(FA_DEVICE_CPU); }
  /*! Takes ownership of a context from fa_context_create(). */
  static Context adopt(fa_context_t* ctx) noexcept { return Context(ctx, Adopt{}); }

  Context(Context&& other) noexcept : ctx_(other.release()) {}
  Context& operator=(Context&& other) noexcept {
    if (this != &other) {
      fa_context_destroy(ctx_);
      ctx_ = other.release();
    }
    return *this;
  }
  Context(Context const&) = delete;
  Context& operator=(Context const&) = delete;
  ~Context() { fa_context_destroy(ctx_); }

  /*! fa_context_device(): the ordinal, or FA_DEVICE_CPU. */
  int device() const {
    int device = 0;
    check(fa_context_device(ctx_, &device));
    return device;
  }

  /*! fa_forward() of q, k, v into o (and the optional lse, float32 [batch, heads_q, seqlen_q]),
   *  the config made from the tensors by Config::attention() and then given to `options` (for
   *  example [](Config& c) { c.causal(); }). */
  template <class T, class Options>
  void forward(Input<T> const& q, Input<T> const& k, Input<T> const& v, Tensor<T> const& o,
               float* lse, Options&& options,
               fa_stream_t stream = nullptr) const {
    Config config = Config::attention(q, k, v, o);
    std::forward<Options>(options)(config);
    forward(config, q.data, k.data, v.data, o.data, lse, stream);
  }
  /*! As above with fa_config's defaults (no mask, 1/sqrt(head_dim)). */
  template <class T>
  void forward(Input<T> const& q, Input<T> const& k, Input<T> const& v, Tensor<T> const& o,
               float* lse = nullptr) const {
    forward(q, k, v, o, lse, [](Config&) {});
  }
  /*! fa_forward() on untyped pointers laid out as `config` says. */
  void forward(Config const& config, void const* q, void const* k, void const* v, void* o,
               float* lse = nullptr, fa_stream_t stream = nullptr) const {
    check(fa_forward(ctx_, &config.raw(), q, k, v, o, lse, stream));
  }
  /*! fa_forward_ex(): with index tensors, per-head parameters and workspace in `args`. */
  void forward(Config const& config, void const* q, void const* k, void const* v, void* o,
               float* lse, fa_run_args const& args, fa_stream_t stream = nullptr) const {
    check(fa_forward_ex(ctx_, &config.raw(), q, k, v, o, lse, &args, stream));
  }

  /*! fa_plan_create(): `config` validated and bound to this context's choice of kernel. */
  Plan plan(Config const& config) const {
    fa_plan_t* plan = nullptr;
    check(fa_plan_create(ctx_, &config.raw(), &plan));
    return Plan(plan);
  }

  fa_context_t* get() const noexcept { return ctx_; }
  /*! Gives up ownership: the caller frees the result with fa_context_destroy(). */
  fa_context_t* release() noexcept { return std::exchange(ctx_, nullptr); }
  explicit operator bool() const noexcept { return ctx_ != nullptr; }

 private:
  struct Adopt {};
  Context(fa_context_t* ctx, Adopt) noexcept : ctx_(ctx) {}

  fa_context_t* ctx_ = nullptr;
};

/*! version() : the loaded library's version string (fa_version_string()). Since 0.3.0. */
inline std::string version() { return fa_version_string(); }

}  // namespace flashattn

#endif  // FLASHATTN_HPP
