//! FlashAttention forward through libflashattn.
//!
//! A [`Context`] runs attention on one CUDA device or on the CPU. Describe the problem with a
//! [`Config`] (shapes, strides, causal, scale; validated by the library), then call
//! [`Context::forward`] on host slices (CPU context) or [`Context::forward_device`] on device
//! pointers (GPU context), or make a [`Plan`] once and run it many times. Errors carry the
//! library's status and its message naming the offending value. The C header
//! (`include/flashattn.h`) documents every operation in detail; each method here names the
//! function it wraps.
//!
//! Tensors are `[batch, seq, heads, head_dim]` ([`Layout::Bshd`]) or PyTorch's
//! `[batch, heads, seq, head_dim]` ([`Layout::Bhsd`], chosen with [`ConfigBuilder::layout`]), with
//! the last dimension contiguous; [`ConfigBuilder::q_strides`] and its siblings take any others.
//!
//! ```
//! use flashattn::{Config, Context, DType, Device};
//!
//! # fn main() -> Result<(), flashattn::Error> {
//! let ctx = Context::new(Device::Cpu)?;
//! // batch 1, 4 query rows, 6 keys, 2 query heads sharing 1 K/V head, head_dim 8
//! let config = Config::builder(DType::F32, 1, 4, 6, 2, 1, 8).causal(true).build()?;
//! let q = vec![0.5f32; 1 * 4 * 2 * 8];
//! let k = vec![0.25f32; 1 * 6 * 1 * 8];
//! let v = vec![1.0f32; 1 * 6 * 1 * 8];
//! let mut o = vec![0.0f32; q.len()];
//! ctx.forward(&config, &q, &k, &v, &mut o, None)?;
//! assert!(o.iter().all(|x| (x - 1.0).abs() < 1e-6)); // every row averages V = 1
//! # Ok(())
//! # }
//! ```
#![deny(missing_docs)]

use std::ffi::{c_void, CStr, CString};
use std::fmt;
use std::marker::PhantomData;
use std::path::Path;
use std::ptr::NonNull;

pub use flashattn_sys as sys;

// ---- Errors ----------------------------------------------------------------------------------

/// A failing `fa_status` of the library.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Status {
    /// `FA_STATUS_INVALID_ARGUMENT`
    InvalidArgument,
    /// `FA_STATUS_BAD_STRUCT_SIZE`
    BadStructSize,
    /// `FA_STATUS_UNSUPPORTED`
    Unsupported,
    /// `FA_STATUS_INVALID_KERNEL_CONFIG`
    InvalidKernelConfig,
    /// `FA_STATUS_KERNEL_NOT_AVAILABLE`
    KernelNotAvailable,
    /// `FA_STATUS_PARSE_ERROR`
    ParseError,
    /// `FA_STATUS_NO_DEVICE`
    NoDevice,
    /// `FA_STATUS_ARCH_MISMATCH`
    ArchMismatch,
    /// `FA_STATUS_CUDA_ERROR`
    CudaError,
    /// `FA_STATUS_OUT_OF_MEMORY`
    OutOfMemory,
    /// `FA_STATUS_WORKSPACE_TOO_SMALL`
    WorkspaceTooSmall,
    /// `FA_STATUS_WRONG_CONTEXT`
    WrongContext,
    /// `FA_STATUS_INTERNAL_ERROR`
    InternalError,
    /// `FA_STATUS_IO_ERROR`
    IoError,
    /// `FA_STATUS_TUNING_ENTRIES_IGNORED` (a warning; [`Context::load_tuning`] reports it as `Ok`)
    TuningEntriesIgnored,
    /// A value this version of the crate does not know.
    Other(u32),
}

impl Status {
    /// The status of a raw value; `None` for `FA_STATUS_SUCCESS`.
    #[allow(clippy::unnecessary_cast)] // fa_status is c_uint, u32 on the targets we build for
    pub fn from_raw(raw: sys::fa_status) -> Option<Status> {
        Some(match raw {
            sys::FA_STATUS_SUCCESS => return None,
            sys::FA_STATUS_INVALID_ARGUMENT => Status::InvalidArgument,
            sys::FA_STATUS_BAD_STRUCT_SIZE => Status::BadStructSize,
            sys::FA_STATUS_UNSUPPORTED => Status::Unsupported,
            sys::FA_STATUS_INVALID_KERNEL_CONFIG => Status::InvalidKernelConfig,
            sys::FA_STATUS_KERNEL_NOT_AVAILABLE => Status::KernelNotAvailable,
            sys::FA_STATUS_PARSE_ERROR => Status::ParseError,
            sys::FA_STATUS_NO_DEVICE => Status::NoDevice,
            sys::FA_STATUS_ARCH_MISMATCH => Status::ArchMismatch,
            sys::FA_STATUS_CUDA_ERROR => Status::CudaError,
            sys::FA_STATUS_OUT_OF_MEMORY => Status::OutOfMemory,
            sys::FA_STATUS_WORKSPACE_TOO_SMALL => Status::WorkspaceTooSmall,
            sys::FA_STATUS_WRONG_CONTEXT => Status::WrongContext,
            sys::FA_STATUS_INTERNAL_ERROR => Status::InternalError,
            sys::FA_STATUS_IO_ERROR => Status::IoError,
            sys::FA_STATUS_TUNING_ENTRIES_IGNORED => Status::TuningEntriesIgnored,
            other => Status::Other(other as u32),
        })
    }

    /// The raw `fa_status` value.
    #[allow(clippy::unnecessary_cast)]
    pub fn raw(self) -> sys::fa_status {
        match self {
            Status::InvalidArgument => sys::FA_STATUS_INVALID_ARGUMENT,
            Status::BadStructSize => sys::FA_STATUS_BAD_STRUCT_SIZE,
            Status::Unsupported => sys::FA_STATUS_UNSUPPORTED,
            Status::InvalidKernelConfig => sys::FA_STATUS_INVALID_KERNEL_CONFIG,
            Status::KernelNotAvailable => sys::FA_STATUS_KERNEL_NOT_AVAILABLE,
            Status::ParseError => sys::FA_STATUS_PARSE_ERROR,
            Status::NoDevice => sys::FA_STATUS_NO_DEVICE,
            Status::ArchMismatch => sys::FA_STATUS_ARCH_MISMATCH,
            Status::CudaError => sys::FA_STATUS_CUDA_ERROR,
            Status::OutOfMemory => sys::FA_STATUS_OUT_OF_MEMORY,
            Status::WorkspaceTooSmall => sys::FA_STATUS_WORKSPACE_TOO_SMALL,
            Status::WrongContext => sys::FA_STATUS_WRONG_CONTEXT,
            Status::InternalError => sys::FA_STATUS_INTERNAL_ERROR,
            Status::IoError => sys::FA_STATUS_IO_ERROR,
            Status::TuningEntriesIgnored => sys::FA_STATUS_TUNING_ENTRIES_IGNORED,
            Status::Other(raw) => raw as sys::fa_status,
        }
    }
}

/// An error of the library: its status and the detail message that names the offending value
/// (`fa_last_error_detail()`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    status: Status,
    detail: String,
}

impl Error {
    /// The library status.
    pub fn status(&self) -> Status {
        self.status
    }
    /// The library's detail message.
    pub fn detail(&self) -> &str {
        &self.detail
    }
    fn new(status: Status, detail: impl Into<String>) -> Error {
        Error { status, detail: detail.into() }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Safety: fa_status_string accepts any value and returns a static NUL-terminated string.
        let name = unsafe { CStr::from_ptr(sys::fa_status_string(self.status.raw())) };
        write!(f, "{}: {}", name.to_string_lossy(), self.detail)
    }
}

impl std::error::Error for Error {}

/// The result of every fallible call.
pub type Result<T> = std::result::Result<T, Error>;

fn last_detail() -> String {
    // Safety: fa_last_error_detail returns this thread's NUL-terminated message, never NULL.
    unsafe { CStr::from_ptr(sys::fa_last_error_detail()) }.to_string_lossy().into_owned()
}

fn check(raw: sys::fa_status) -> Result<()> {
    match Status::from_raw(raw) {
        None => Ok(()),
        Some(status) => Err(Error::new(status, last_detail())),
    }
}

/// The loaded library's version, e.g. `"0.3.0"` (`fa_version_string`).
pub fn version() -> &'static str {
    // Safety: fa_version_string returns a static NUL-terminated ASCII string.
    unsafe { CStr::from_ptr(sys::fa_version_string()) }.to_str().unwrap_or("?")
}

// ---- Element types ---------------------------------------------------------------------------

/// Element types of q, k, v and o (`fa_dtype`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
    /// IEEE binary16.
    F16,
    /// bfloat16.
    Bf16,
    /// IEEE binary32 (CPU contexts only).
    F32,
    /// FP8 E4M3 (e4m3fn): an input type only (q, or k and v; see
    /// [`ConfigBuilder::kv_dtype`]), descaled by [`RunArgs::q_descale`] and its siblings. CPU
    /// contexts run it; GPU contexts run e4m3 K/V caches with 16-bit queries (both families)
    /// and, on Hopper, e4m3 queries with an e4m3 cache (the sm90 family's FP8 kernels at head
    /// dims up to 256; elsewhere [`Status::Unsupported`]).
    E4m3,
}

impl DType {
    fn raw(self) -> i32 {
        (match self {
            DType::F16 => sys::FA_DTYPE_FP16,
            DType::Bf16 => sys::FA_DTYPE_BF16,
            DType::F32 => sys::FA_DTYPE_FP32,
            DType::E4m3 => sys::FA_DTYPE_E4M3,
        }) as i32
    }
    fn from_raw(raw: i32) -> Option<DType> {
        match raw as sys::fa_dtype {
            sys::FA_DTYPE_FP16 => Some(DType::F16),
            sys::FA_DTYPE_BF16 => Some(DType::Bf16),
            sys::FA_DTYPE_FP32 => Some(DType::F32),
            sys::FA_DTYPE_E4M3 => Some(DType::E4m3),
            _ => None,
        }
    }
}

/// A bfloat16 value (its bits), for host slices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(transparent)]
pub struct Bf16(pub u16);

/// An IEEE binary16 value (its bits), for host slices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(transparent)]
pub struct F16(pub u16);

impl Bf16 {
    /// Rounds to nearest even.
    pub fn from_f32(x: f32) -> Bf16 {
        let bits = x.to_bits();
        if x.is_nan() {
            return Bf16(((bits >> 16) | 0x40) as u16);
        }
        Bf16(((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) as u16)
    }
    /// Exact.
    pub fn to_f32(self) -> f32 {
        f32::from_bits((self.0 as u32) << 16)
    }
}

impl F16 {
    /// Rounds to nearest even; overflow gives infinity.
    pub fn from_f32(x: f32) -> F16 {
        let bits = x.to_bits();
        let sign = ((bits >> 16) & 0x8000) as u16;
        let a = bits & 0x7FFF_FFFF;
        if a > 0x7F80_0000 {
            return F16(sign | 0x7E00);
        }
        if a >= 0x477F_F000 {
            return F16(sign | 0x7C00);
        }
        if a >= 0x3880_0000 {
            let r = a - (112 << 23);
            return F16(sign | ((r + 0xFFF + ((r >> 13) & 1)) >> 13) as u16);
        }
        if a < 0x3300_0000 {
            return F16(sign);
        }
        let mantissa = (a & 0x7F_FFFF) | 0x80_0000;
        let shift = 126 - (a >> 23);
        let mut r = mantissa >> shift;
        let rest = mantissa & ((1 << shift) - 1);
        let half = 1 << (shift - 1);
        if rest > half || (rest == half && r & 1 == 1) {
            r += 1;
        }
        F16(sign | r as u16)
    }
    /// Exact.
    pub fn to_f32(self) -> f32 {
        let sign = ((self.0 & 0x8000) as u32) << 16;
        let exponent = ((self.0 >> 10) & 0x1F) as u32;
        let mantissa = (self.0 & 0x3FF) as u32;
        let bits = match exponent {
            0x1F => sign | 0x7F80_0000 | (mantissa << 13),
            0 if mantissa == 0 => sign,
            0 => {
                let value = mantissa as f32 * (1.0 / 16_777_216.0);
                return if sign != 0 { -value } else { value };
            }
            e => sign | ((e + 112) << 23) | (mantissa << 13),
        };
        f32::from_bits(bits)
    }
}

/// An FP8 E4M3 value (e4m3fn: its bits), for host slices of q, k and v.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(transparent)]
pub struct E4m3(pub u8);

impl E4m3 {
    /// Rounds to nearest even; magnitudes past 448 (the largest value; the format has no
    /// infinity) and NaN give NaN (0x7f with the sign).
    pub fn from_f32(x: f32) -> E4m3 {
        let sign = if x.is_sign_negative() { 0x80u8 } else { 0 };
        let a = x.abs();
        if a.is_nan() || a > 464.0 {
            // 464 is halfway between 448 and the 480 the format lacks (its bits are NaN's): it
            // rounds to even, 448; anything larger is out of range.
            return E4m3(sign | 0x7F);
        }
        // Values below 2^-6 are subnormal multiples of 2^-9; others have 3 fraction bits.
        let exponent = if a < 2f32.powi(-6) { -6 } else { a.log2().floor() as i32 };
        let quantum = 2f32.powi(exponent - 3);
        let r = (a / quantum).round_ties_even() * quantum;
        (0u8..=0x7E).map(E4m3).find(|e| e.to_f32() == r).map_or(E4m3(sign | 0x7F), |e| E4m3(e.0 | sign))
    }
    /// Exact (NaN for 0x7f and 0xff).
    pub fn to_f32(self) -> f32 {
        let sign = if self.0 & 0x80 != 0 { -1.0 } else { 1.0 };
        let exponent = ((self.0 >> 3) & 0xF) as i32;
        let mantissa = (self.0 & 0x7) as f32;
        match exponent {
            15 if mantissa == 7.0 => f32::NAN,
            0 => sign * mantissa * 2f32.powi(-9),
            e => sign * (1.0 + mantissa / 8.0) * 2f32.powi(e - 7),
        }
    }
}

/// An element type usable in host slices.
pub trait Element: Copy + private::Sealed {
    /// Its `DType`.
    const DTYPE: DType;
}
impl Element for f32 {
    const DTYPE: DType = DType::F32;
}
impl Element for F16 {
    const DTYPE: DType = DType::F16;
}
impl Element for Bf16 {
    const DTYPE: DType = DType::Bf16;
}
impl Element for E4m3 {
    const DTYPE: DType = DType::E4m3;
}
mod private {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for super::F16 {}
    impl Sealed for super::Bf16 {}
    impl Sealed for super::E4m3 {}
}

// ---- Problems --------------------------------------------------------------------------------

/// The granularity of the FP8 descale factors (`fa_descale`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Descale {
    /// One factor per tensor.
    #[default]
    PerTensor,
    /// `batch * heads_kv` factors per tensor, row-major, as FlashAttention 3's `(batch,
    /// heads_kv)` descales: entry `[b][g]` scales sequence b's K/V head g and the query heads
    /// that read it.
    PerHeadKv,
}

/// One attention problem (`fa_config`), validated by the library when built.
#[derive(Clone, Copy)]
pub struct Config {
    raw: sys::fa_config,
}

/// The order of the dimensions of packed q, k, v and o tensors; head_dim is always last and
/// contiguous. This is only the strides' pattern, independent of the C field `fa_config.layout`
/// (dense, varlen, KV cache, paged), which [`ConfigBuilder::varlen`], [`ConfigBuilder::kv_cache`]
/// and [`ConfigBuilder::paged_kv`] set; the strides follow it (see [`ConfigBuilder::layout`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Layout {
    /// `[batch, seq, heads, head_dim]`, FlashAttention's (the default).
    #[default]
    Bshd,
    /// `[batch, heads, seq, head_dim]`, PyTorch's (`scaled_dot_product_attention`); a paged
    /// cache's pages `[num_pages, heads_kv, page_size, head_dim]` (FlashInfer's HND), a varlen
    /// batch's q and o `[heads_q, total_q, head_dim]`, k and v `[heads_kv, total_k, head_dim]`.
    Bhsd,
}

/// Builds a [`Config`]; [`ConfigBuilder::build`] validates it (`fa_config_validate`).
#[derive(Clone, Copy)]
pub struct ConfigBuilder {
    raw: sys::fa_config,
    // The layout whose packed strides build() gives every tensor (q, k, v, o) not in `explicit`,
    // from the sizes, head_dim_v and fa_config.layout as they are then: resolved in layout(),
    // a later head_dim_v(), paged_kv() or varlen() left v's and o's, or a paged cache's and a
    // varlen batch's, strides those of a dense [batch, heads, seq, d] problem.
    layout: Layout,
    explicit: [bool; 4],
}

/// Elements each tensor spans from its base pointer (`fa_config_extents`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extents {
    /// q
    pub q: usize,
    /// k
    pub k: usize,
    /// v
    pub v: usize,
    /// o
    pub o: usize,
    /// lse: batch * heads_q * seqlen_q (varlen: heads_q * total_q)
    pub lse: usize,
}

/// ALiBi: `slope * |i + Sk - Sq - j|` is subtracted from each score (`fa_alibi`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Alibi {
    /// No bias (the default).
    #[default]
    Off,
    /// `heads_q` slopes.
    PerHead,
    /// `batch * heads_q` slopes, row-major.
    PerBatch,
}

impl Alibi {
    fn raw(self) -> i32 {
        (match self {
            Alibi::Off => sys::FA_ALIBI_NONE,
            Alibi::PerHead => sys::FA_ALIBI_PER_HEAD,
            Alibi::PerBatch => sys::FA_ALIBI_PER_BATCH,
        }) as i32
    }
}

/// The host-side arguments of a run that are not q, k, v, o or lse (`fa_run_args`): the index
/// tensors of varlen and KV-cache layouts and the per-head parameters, each needed only when the
/// config asks for it. Their lengths are checked against the config before the library reads
/// them, and a CPU run reports malformed contents (decreasing offsets, lengths or page indices
/// out of range) as [`Status::InvalidArgument`].
#[derive(Debug, Clone, Copy, Default)]
pub struct RunArgs<'a> {
    /// Varlen: `batch + 1` query row offsets, from 0 to `total_q`.
    pub cu_seqlens_q: Option<&'a [i32]>,
    /// Varlen: `batch + 1` key row offsets, from 0 to `total_k`.
    pub cu_seqlens_k: Option<&'a [i32]>,
    /// KV cache (contiguous or paged): `batch` visible lengths.
    pub cache_seqlens: Option<&'a [i32]>,
    /// Paged KV cache: `batch * max_pages_per_seq` page indices, row-major.
    pub block_table: Option<&'a [i32]>,
    /// ALiBi: `heads_q` (per head) or `batch * heads_q` (per batch) slopes.
    pub alibi_slopes: Option<&'a [f32]>,
    /// Sinks: `heads_q` logits.
    pub sinks: Option<&'a [f32]>,
    /// E4M3 q: its descale factor(s), 1 or `batch * heads_kv` ([`ConfigBuilder::descale`]);
    /// `None` means 1. Refused for a q that is not E4M3.
    pub q_descale: Option<&'a [f32]>,
    /// E4M3 k: as `q_descale`.
    pub k_descale: Option<&'a [f32]>,
    /// E4M3 v: as `q_descale`; it multiplies the output.
    pub v_descale: Option<&'a [f32]>,
}

/// [`RunArgs`] for device memory, with the workspace: raw pointers on the context's
/// device (NULL where the config needs none). Used by the `unsafe` device calls.
#[derive(Debug, Clone, Copy)]
#[allow(missing_docs)]
pub struct DeviceRunArgs {
    pub cu_seqlens_q: *const i32,
    pub cu_seqlens_k: *const i32,
    pub cache_seqlens: *const i32,
    pub block_table: *const i32,
    pub alibi_slopes: *const f32,
    pub sinks: *const f32,
    pub q_descale: *const f32,
    pub k_descale: *const f32,
    pub v_descale: *const f32,
    /// Scratch memory of [`Plan::workspace_size`] bytes, or NULL.
    pub workspace: *mut c_void,
    /// Its size in bytes.
    pub workspace_size: usize,
}

impl Default for DeviceRunArgs {
    fn default() -> Self {
        use std::ptr::null;
        DeviceRunArgs {
            cu_seqlens_q: null(),
            cu_seqlens_k: null(),
            cache_seqlens: null(),
            block_table: null(),
            alibi_slopes: null(),
            sinks: null(),
            q_descale: null(),
            k_descale: null(),
            v_descale: null(),
            workspace: std::ptr::null_mut(),
            workspace_size: 0,
        }
    }
}

impl DeviceRunArgs {
    fn to_raw(self) -> sys::fa_run_args {
        let mut raw = empty_run_args();
        raw.cu_seqlens_q = self.cu_seqlens_q;
        raw.cu_seqlens_k = self.cu_seqlens_k;
        raw.cache_seqlens = self.cache_seqlens;
        raw.block_table = self.block_table;
        raw.alibi_slopes = self.alibi_slopes;
        raw.sinks = self.sinks;
        raw.q_descale = self.q_descale;
        raw.k_descale = self.k_descale;
        raw.v_descale = self.v_descale;
        raw.workspace = self.workspace;
        raw.workspace_size = self.workspace_size;
        raw
    }
}

fn empty_run_args() -> sys::fa_run_args {
    // Safety: plain data; fa_run_args_init sets struct_size and zeroes the rest.
    let mut raw: sys::fa_run_args = unsafe { std::mem::zeroed() };
    // Safety: a valid pointer to a local.
    unsafe { sys::fa_run_args_init(&mut raw) };
    raw
}

/// Checks the host run arguments' lengths against `config` and makes the C struct; the
/// pointers borrow from `args`, which outlives the call that uses them.
fn host_run_args(config: &Config, args: &RunArgs<'_>) -> Result<sys::fa_run_args> {
    let r = &config.raw;
    let usize_of = |n: i64| usize::try_from(n).unwrap_or(usize::MAX);
    let (batch, heads_q) = (usize_of(r.batch), usize_of(r.heads_q));
    let layout = r.layout as sys::fa_layout;
    let needed = |name: &str, slice: Option<&[i32]>, wanted: bool, len: usize| -> Result<*const i32> {
        match slice {
            Some(s) if wanted => slice_fits(name, s, len).map(|()| s.as_ptr()),
            Some(_) => Err(Error::new(Status::InvalidArgument, format!("{name} given, but the config does not use it"))),
            None if wanted => Err(Error::new(Status::InvalidArgument, format!("the config needs {name}"))),
            None => Ok(std::ptr::null()),
        }
    };
    let varlen = layout == sys::FA_LAYOUT_VARLEN;
    let cache = layout == sys::FA_LAYOUT_KV_CACHE || layout == sys::FA_LAYOUT_PAGED_KV;
    let paged = layout == sys::FA_LAYOUT_PAGED_KV;
    let mut raw = empty_run_args();
    raw.cu_seqlens_q = needed("cu_seqlens_q", args.cu_seqlens_q, varlen, batch.saturating_add(1))?;
    raw.cu_seqlens_k = needed("cu_seqlens_k", args.cu_seqlens_k, varlen, batch.saturating_add(1))?;
    raw.cache_seqlens = needed("cache_seqlens", args.cache_seqlens, cache, batch)?;
    let pages = batch.saturating_mul(usize_of(r.max_pages_per_seq));
    raw.block_table = needed("block_table", args.block_table, paged, pages)?;
    let floats = |name: &str, slice: Option<&[f32]>, len: usize| -> Result<*const f32> {
        match slice {
            Some(s) if len > 0 => slice_fits(name, s, len).map(|()| s.as_ptr()),
            Some(_) => Err(Error::new(Status::InvalidArgument, format!("{name} given, but the config does not use it"))),
            None if len > 0 => Err(Error::new(Status::InvalidArgument, format!("the config needs {name}"))),
            None => Ok(std::ptr::null()),
        }
    };
    let slopes = match r.alibi as sys::fa_alibi {
        sys::FA_ALIBI_PER_HEAD => heads_q,
        sys::FA_ALIBI_PER_BATCH => batch.saturating_mul(heads_q),
        _ => 0,
    };
    raw.alibi_slopes = floats("alibi_slopes", args.alibi_slopes, slopes)?;
    raw.sinks = floats("sinks", args.sinks, if r.sinks != 0 { heads_q } else { 0 })?;
    // A descale is optional (None is 1); given, it must be of an E4M3 tensor and hold 1 or
    // batch * heads_kv factors.
    let per_head = r.descale == sys::FA_DESCALE_PER_HEAD_KV as i32;
    let factors = if per_head { batch.saturating_mul(usize_of(r.heads_kv)) } else { 1 };
    let (q_fp8, kv_fp8) = (config.dtype() == DType::E4m3, config.kv_dtype() == DType::E4m3);
    let descale = |name: &str, slice: Option<&[f32]>, fp8: bool| -> Result<*const f32> {
        match slice {
            Some(s) if fp8 => slice_fits(name, s, factors).map(|()| s.as_ptr()),
            Some(_) => Err(Error::new(Status::InvalidArgument, format!("{name} given, but its tensor is not E4M3"))),
            None => Ok(std::ptr::null()),
        }
    };
    raw.q_descale = descale("q_descale", args.q_descale, q_fp8)?;
    raw.k_descale = descale("k_descale", args.k_descale, kv_fp8)?;
    raw.v_descale = descale("v_descale", args.v_descale, kv_fp8)?;
    Ok(raw)
}

/// The shape of a [`Context::merge_states`] (`fa_merge_config`): O tensors
/// `[batch, seqlen, heads, head_dim]` (packed unless [`MergeConfig::o_strides`] says otherwise),
/// LSE tensors `[batch, heads, seqlen]` float32, as [`Context::forward`] writes them.
#[derive(Clone, Copy)]
pub struct MergeConfig {
    raw: sys::fa_merge_config,
}

impl MergeConfig {
    /// Packed tensors of this shape; a varlen result is `batch` 1, `seqlen` total_q.
    pub fn new(dtype: DType, batch: i64, seqlen: i64, heads: i64, head_dim: i64) -> MergeConfig {
        // Safety: plain data; fa_merge_config_init fills it.
        let mut raw: sys::fa_merge_config = unsafe { std::mem::zeroed() };
        // Safety: a valid pointer to a local.
        unsafe { sys::fa_merge_config_init(&mut raw) };
        raw.dtype = dtype.raw();
        (raw.batch, raw.seqlen, raw.heads, raw.head_dim) = (batch, seqlen, heads, head_dim);
        MergeConfig { raw }
    }
    /// The (batch, seq, head) strides, in elements, shared by the three O tensors.
    pub fn o_strides(mut self, batch: i64, seq: i64, head: i64) -> Self {
        (self.raw.o_batch_stride, self.raw.o_seq_stride, self.raw.o_head_stride) = (batch, seq, head);
        self
    }
    /// Elements an O tensor spans and an LSE tensor holds, computed with checked arithmetic.
    /// (0, 0) for a shape the library refuses before it reads any pointer: a size below 1, or
    /// an extent that overflows i64 (the library bounds them by 2^60 and names the value).
    fn spans(&self) -> (usize, usize) {
        let r = &self.raw;
        let dims = [r.batch, r.seqlen, r.heads, r.head_dim];
        if dims.iter().any(|&n| n < 1) {
            return (0, 0);
        }
        let packed = r.o_batch_stride == 0 && r.o_seq_stride == 0 && r.o_head_stride == 0;
        let spans = || -> Option<(usize, usize)> {
            let (sb, ss, sh) = if packed {
                let row = r.heads.checked_mul(r.head_dim)?;
                (r.seqlen.checked_mul(row)?, row, r.head_dim)
            } else {
                (r.o_batch_stride, r.o_seq_stride, r.o_head_stride)
            };
            let mut span = r.head_dim;
            for (n, stride) in [(r.batch, sb), (r.seqlen, ss), (r.heads, sh)] {
                span = (n - 1).checked_mul(stride)?.checked_add(span)?;
            }
            let rows = r.batch.checked_mul(r.seqlen)?.checked_mul(r.heads)?;
            Some((usize::try_from(span).ok()?, usize::try_from(rows).ok()?))
        };
        spans().unwrap_or((0, 0))
    }
}

impl Config {
    /// Starts a config with packed strides, non-causal, scale 1/sqrt(head_dim).
    /// q is `[batch, seqlen_q, heads_q, head_dim]`, k and v `[batch, seqlen_k, heads_kv, head_dim]`
    /// and o like q, until [`ConfigBuilder::head_dim_v`] gives v and o another last dimension.
    pub fn builder(
        dtype: DType,
        batch: i64,
        seqlen_q: i64,
        seqlen_k: i64,
        heads_q: i64,
        heads_kv: i64,
        head_dim: i64,
    ) -> ConfigBuilder {
        // Safety: fa_config is plain data; fa_config_init fills it (it only fails on NULL).
        let mut raw: sys::fa_config = unsafe { std::mem::zeroed() };
        // Safety: a valid pointer to a local.
        unsafe { sys::fa_config_init(&mut raw) };
        raw.dtype = dtype.raw();
        raw.batch = batch;
        raw.seqlen_q = seqlen_q;
        raw.seqlen_k = seqlen_k;
        raw.heads_q = heads_q;
        raw.heads_kv = heads_kv;
        raw.head_dim = head_dim;
        ConfigBuilder { raw, layout: Layout::Bshd, explicit: [false; 4] }
    }

    /// The element type of q (and of k, v and o unless [`Config::kv_dtype`] /
    /// [`Config::out_dtype`] differ).
    pub fn dtype(&self) -> DType {
        DType::from_raw(self.raw.dtype).expect("validated")
    }

    /// The element type of k and v (`fa_config.kv_dtype`, its 0 resolved to the dtype).
    pub fn kv_dtype(&self) -> DType {
        match self.raw.kv_dtype {
            0 => self.dtype(),
            t => DType::from_raw(t).expect("validated"),
        }
    }

    /// The element type of o: the dtype, or for E4M3 queries `fa_config.out_dtype` (0: BF16).
    pub fn out_dtype(&self) -> DType {
        match (self.dtype(), self.raw.out_dtype) {
            (DType::E4m3, 0) => DType::Bf16,
            (DType::E4m3, t) => DType::from_raw(t).expect("validated"),
            (t, _) => t,
        }
    }

    /// The elements each tensor spans (`fa_config_extents`).
    pub fn extents(&self) -> Result<Extents> {
        let (mut q, mut k, mut v, mut o, mut lse) = (0i64, 0i64, 0i64, 0i64, 0i64);
        // Safety: valid pointers to a config and to locals.
        check(unsafe { sys::fa_config_extents(&self.raw, &mut q, &mut k, &mut v, &mut o, &mut lse) })?;
        let size = |n: i64| {
            usize::try_from(n).map_err(|_| {
                Error::new(Status::InvalidArgument, format!("{n} elements exceed the address space"))
            })
        };
        Ok(Extents { q: size(q)?, k: size(k)?, v: size(v)?, o: size(o)?, lse: size(lse)? })
    }

    /// The raw struct, for `flashattn_sys` calls.
    pub fn as_raw(&self) -> &sys::fa_config {
        &self.raw
    }
}

impl ConfigBuilder {
    /// Bottom-right aligned causal mask.
    pub fn causal(mut self, causal: bool) -> Self {
        self.raw.causal = causal as i32;
        self
    }
    /// The scale of the scores (0 means 1/sqrt(head_dim)).
    pub fn softmax_scale(mut self, scale: f32) -> Self {
        self.raw.softmax_scale = scale;
        self
    }
    /// The value head dim (`fa_config.head_dim_v`): v becomes `[.., heads_kv, head_dim_v]` and o
    /// `[.., heads_q, head_dim_v]`, while q and k keep head_dim and the default scale stays
    /// 1/sqrt(head_dim); 0 (the default) means head_dim. The CPU backend runs any value >= 1,
    /// GPU kernels only head_dim itself for now ([`Status::Unsupported`] otherwise). Set it
    /// before [`ConfigBuilder::layout`], whose strides use it.
    pub fn head_dim_v(mut self, head_dim_v: i64) -> Self {
        self.raw.head_dim_v = head_dim_v;
        self
    }
    /// The element type of k and v when it differs from q's (`fa_config.kv_dtype`): only
    /// [`DType::E4m3`] under [`DType::F16`] or [`DType::Bf16`] queries (an FP8 cache; o keeps
    /// q's type), and [`DType::E4m3`] for E4M3 queries. Other pairs fail in
    /// [`ConfigBuilder::build`], naming both.
    pub fn kv_dtype(mut self, dtype: DType) -> Self {
        self.raw.kv_dtype = dtype.raw();
        self
    }
    /// The element type of o for E4M3 queries (`fa_config.out_dtype`): [`DType::Bf16`] (the
    /// default) or [`DType::F16`]. Other queries write o in their own type and refuse it.
    pub fn out_dtype(mut self, dtype: DType) -> Self {
        self.raw.out_dtype = dtype.raw();
        self
    }
    /// How many descale factors each of [`RunArgs::q_descale`], `k_descale` and `v_descale`
    /// holds (`fa_config.descale`). Only for configs with E4M3 tensors.
    pub fn descale(mut self, descale: Descale) -> Self {
        self.raw.descale = (match descale {
            Descale::PerTensor => sys::FA_DESCALE_PER_TENSOR,
            Descale::PerHeadKv => sys::FA_DESCALE_PER_HEAD_KV,
        }) as i32;
        self
    }
    /// Gives all four tensors the strides of packed tensors in `layout` (resolved in
    /// [`ConfigBuilder::build`], from the sizes, value head dim and layout the builder then
    /// holds, so the calls may come in any order); a later `*_strides` call sets one tensor's
    /// own. [`Layout::Bshd`] is the default.
    pub fn layout(mut self, layout: Layout) -> Self {
        self.layout = layout;
        self.explicit = [false; 4];
        self
    }
    /// q's (batch, seq, head) strides in elements.
    pub fn q_strides(mut self, batch: i64, seq: i64, head: i64) -> Self {
        (self.raw.q_batch_stride, self.raw.q_seq_stride, self.raw.q_head_stride) = (batch, seq, head);
        self.explicit[0] = true;
        self
    }
    /// k's (batch, seq, head) strides in elements.
    pub fn k_strides(mut self, batch: i64, seq: i64, head: i64) -> Self {
        (self.raw.k_batch_stride, self.raw.k_seq_stride, self.raw.k_head_stride) = (batch, seq, head);
        self.explicit[1] = true;
        self
    }
    /// v's (batch, seq, head) strides in elements.
    pub fn v_strides(mut self, batch: i64, seq: i64, head: i64) -> Self {
        (self.raw.v_batch_stride, self.raw.v_seq_stride, self.raw.v_head_stride) = (batch, seq, head);
        self.explicit[2] = true;
        self
    }
    /// o's (batch, seq, head) strides in elements.
    pub fn o_strides(mut self, batch: i64, seq: i64, head: i64) -> Self {
        (self.raw.o_batch_stride, self.raw.o_seq_stride, self.raw.o_head_stride) = (batch, seq, head);
        self.explicit[3] = true;
        self
    }
    /// The (batch, seq, head) strides of packed q, k, v and o in the builder's layout; None when
    /// they overflow i64 (the sizes are the caller's, unchecked until fa_config_validate).
    fn packed_strides(&self) -> Option<[(i64, i64, i64); 4]> {
        let r = &self.raw;
        if self.layout == Layout::Bshd {
            return Some([(0, 0, 0); 4]);  // all-zero strides: the library's packed bshd
        }
        let dv = if r.head_dim_v != 0 { r.head_dim_v } else { r.head_dim };
        let varlen = r.layout == sys::FA_LAYOUT_VARLEN as i32;
        // [outer, heads, rows, d]: a varlen batch has no outer dimension (batch stride 0).
        let bhsd = |heads: i64, rows: i64, d: i64| {
            let head = rows.checked_mul(d)?;
            Some((if varlen { 0 } else { heads.checked_mul(head)? }, d, head))
        };
        let (q_rows, k_rows) = if varlen {
            (r.total_q, r.total_k)
        } else if r.layout == sys::FA_LAYOUT_PAGED_KV as i32 {
            (r.seqlen_q, r.page_size)
        } else {
            (r.seqlen_q, r.seqlen_k)
        };
        Some([bhsd(r.heads_q, q_rows, r.head_dim)?, bhsd(r.heads_kv, k_rows, r.head_dim)?,
              bhsd(r.heads_kv, k_rows, dv)?, bhsd(r.heads_q, q_rows, dv)?])
    }
    /// Sliding window: key j is visible to query i iff
    /// `i + Sk - Sq - left <= j <= i + Sk - Sq + right` (per sequence); a negative bound is
    /// unbounded on that side, and `(-1, -1)` turns the window off. Combines with causal.
    pub fn window(mut self, left: i64, right: i64) -> Self {
        let on = left >= 0 || right >= 0;
        self.raw.window = on as i32;
        // Without the window the C API requires both bounds to be 0.
        (self.raw.window_left, self.raw.window_right) = if on { (left, right) } else { (0, 0) };
        self
    }
    /// Logit soft-capping: each scaled score s becomes `softcap * tanh(s / softcap)`; 0 is off.
    pub fn softcap(mut self, softcap: f32) -> Self {
        self.raw.softcap = softcap;
        self
    }
    /// ALiBi biases, with slopes passed at run time ([`RunArgs::alibi_slopes`]).
    pub fn alibi(mut self, alibi: Alibi) -> Self {
        self.raw.alibi = alibi.raw();
        self
    }
    /// Attention sinks: one logit per query head ([`RunArgs::sinks`]) joins each row's softmax
    /// denominator with no value row.
    pub fn sinks(mut self, sinks: bool) -> Self {
        self.raw.sinks = sinks as i32;
        self
    }
    /// GPU split-KV: split each sequence's keys across this many thread blocks (0: the library
    /// chooses; 1: never). A split plan needs a workspace ([`Plan::workspace_size`]).
    pub fn num_splits(mut self, splits: i32) -> Self {
        self.raw.num_splits = splits;
        self
    }
    /// Variable-length sequences (`FA_LAYOUT_VARLEN`): q and o are `[total_q, heads_q, head_dim]`,
    /// k and v `[total_k, heads_kv, head_dim]`; sequence b owns the rows between consecutive
    /// entries of [`RunArgs::cu_seqlens_q`] / [`RunArgs::cu_seqlens_k`]. The builder's
    /// `seqlen_q` and `seqlen_k` are the longest sequences' lengths; lse is `[heads_q, total_q]`.
    pub fn varlen(mut self, total_q: i64, total_k: i64) -> Self {
        self.raw.layout = sys::FA_LAYOUT_VARLEN as i32;
        (self.raw.total_q, self.raw.total_k) = (total_q, total_k);
        self
    }
    /// A contiguous KV cache (`FA_LAYOUT_KV_CACHE`): k and v are `[batch, seqlen_k, heads_kv,
    /// head_dim]` of which sequence b sees the first [`RunArgs::cache_seqlens`]`[b]` rows.
    pub fn kv_cache(mut self) -> Self {
        self.raw.layout = sys::FA_LAYOUT_KV_CACHE as i32;
        self
    }
    /// A paged KV cache (`FA_LAYOUT_PAGED_KV`): k and v are pages `[num_pages, page_size,
    /// heads_kv, head_dim]` (any page size >= 1); row j of sequence b lives in page
    /// [`RunArgs::block_table`]`[b * max_pages_per_seq + j / page_size]`, and the sequence sees
    /// [`RunArgs::cache_seqlens`]`[b]` rows.
    pub fn paged_kv(mut self, num_pages: i64, page_size: i64, max_pages_per_seq: i64) -> Self {
        self.raw.layout = sys::FA_LAYOUT_PAGED_KV as i32;
        (self.raw.num_pages, self.raw.page_size, self.raw.max_pages_per_seq) =
            (num_pages, page_size, max_pages_per_seq);
        self
    }
    /// Validates (`fa_config_validate`): the error names the offending field and value.
    pub fn build(self) -> Result<Config> {
        let mut raw = self.raw;
        let Some(packed) = self.packed_strides() else {
            return Err(Error::new(
                Status::InvalidArgument,
                format!(
                    "Layout::Bhsd: the packed strides heads x rows x head_dim overflow i64 \
                     (heads_q = {}, seqlen_q = {}, heads_kv = {}, seqlen_k = {}, head_dim = {}, \
                     head_dim_v = {}, page_size = {}, total_q = {}, total_k = {})",
                    raw.heads_q, raw.seqlen_q, raw.heads_kv, raw.seqlen_k, raw.head_dim,
                    raw.head_dim_v, raw.page_size, raw.total_q, raw.total_k
                ),
            ));
        };
        let strides = [
            (&mut raw.q_batch_stride, &mut raw.q_seq_stride, &mut raw.q_head_stride),
            (&mut raw.k_batch_stride, &mut raw.k_seq_stride, &mut raw.k_head_stride),
            (&mut raw.v_batch_stride, &mut raw.v_seq_stride, &mut raw.v_head_stride),
            (&mut raw.o_batch_stride, &mut raw.o_seq_stride, &mut raw.o_head_stride),
        ];
        for ((b, s, h), (explicit, (pb, ps, ph))) in strides.into_iter().zip(self.explicit.into_iter().zip(packed)) {
            if !explicit {
                (*b, *s, *h) = (pb, ps, ph);
            }
        }
        // Safety: a valid pointer to an initialised config.
        check(unsafe { sys::fa_config_validate(&raw) })?;
        Ok(Config { raw })
    }
}

// ---- Kernels ---------------------------------------------------------------------------------

/// The tuning knobs of one GPU kernel (`fa_kernel_config`). Displayed and parsed in the short
/// form, e.g. `(BF16, 128, 128, 64, 4): async+eager+swizzled+load_2_2_0_tiles`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub struct KernelConfig {
    pub dtype: DType,
    pub d_head: i32,
    pub b_r: i32,
    pub b_c: i32,
    pub n_warps: i32,
    pub async_copy: bool,
    pub eager_load_blocks: bool,
    pub swizzled: bool,
    pub q_mma_load_k_tiles: i32,
    pub k_mma_load_k_tiles: i32,
    pub v_mma_load_k_tiles: i32,
    pub mma_double_buffer_loads: bool,
    pub optimized_softmax: bool,
    /// The kernel family; the mma.sync knobs above are off in the sm90 family.
    pub family: Family,
    /// sm90: K/V pipeline stages in shared memory; 0 in the mma.sync family.
    pub stages: i32,
    /// sm90: the softmax overlapped with the next key block's wgmma; off in the mma.sync family.
    pub overlap: bool,
    /// sm90 with two consumer warpgroups: they take turns issuing wgmma; off in the mma.sync
    /// family.
    pub pingpong: bool,
    /// sm90: one thread block per SM walks the query tiles; off in the mma.sync family.
    pub persistent: bool,
}

/// The kernel families (`fa_kernel_family`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Family {
    /// The FA2 kernel (mma.sync), sm_80 and newer.
    #[default]
    MmaSync,
    /// The Hopper kernel (TMA, wgmma, warp specialisation), compute capability 9.0 only.
    Sm90,
}

fn empty_kernel_config() -> sys::fa_kernel_config {
    // Safety: plain data, then initialised by the library (which only fails on NULL).
    let mut raw: sys::fa_kernel_config = unsafe { std::mem::zeroed() };
    // Safety: a valid pointer to a local.
    unsafe { sys::fa_kernel_config_init(&mut raw) };
    raw
}

impl KernelConfig {
    fn to_raw(self) -> sys::fa_kernel_config {
        let mut raw = empty_kernel_config();
        raw.dtype = self.dtype.raw();
        raw.d_head = self.d_head;
        raw.B_r = self.b_r;
        raw.B_c = self.b_c;
        raw.n_warps = self.n_warps;
        raw.async_copy = self.async_copy as i32;
        raw.eager_load_blocks = self.eager_load_blocks as i32;
        raw.swizzled = self.swizzled as i32;
        raw.Q_mma_load_K_tiles = self.q_mma_load_k_tiles;
        raw.K_mma_load_K_tiles = self.k_mma_load_k_tiles;
        raw.V_mma_load_K_tiles = self.v_mma_load_k_tiles;
        raw.mma_double_buffer_loads = self.mma_double_buffer_loads as i32;
        raw.optimized_softmax = self.optimized_softmax as i32;
        raw.family = (match self.family {
            Family::MmaSync => sys::FA_FAMILY_MMA_SYNC,
            Family::Sm90 => sys::FA_FAMILY_SM90,
        }) as i32;
        raw.stages = self.stages;
        raw.overlap = self.overlap as i32;
        raw.pingpong = self.pingpong as i32;
        raw.persistent = self.persistent as i32;
        raw
    }

    fn from_raw(raw: &sys::fa_kernel_config) -> Result<KernelConfig> {
        let dtype = DType::from_raw(raw.dtype)
            .ok_or_else(|| Error::new(Status::InvalidArgument, format!("dtype = {}", raw.dtype)))?;
        Ok(KernelConfig {
            dtype,
            d_head: raw.d_head,
            b_r: raw.B_r,
            b_c: raw.B_c,
            n_warps: raw.n_warps,
            async_copy: raw.async_copy != 0,
            eager_load_blocks: raw.eager_load_blocks != 0,
            swizzled: raw.swizzled != 0,
            q_mma_load_k_tiles: raw.Q_mma_load_K_tiles,
            k_mma_load_k_tiles: raw.K_mma_load_K_tiles,
            v_mma_load_k_tiles: raw.V_mma_load_K_tiles,
            mma_double_buffer_loads: raw.mma_double_buffer_loads != 0,
            optimized_softmax: raw.optimized_softmax != 0,
            family: match raw.family as sys::fa_kernel_family {
                sys::FA_FAMILY_MMA_SYNC => Family::MmaSync,
                sys::FA_FAMILY_SM90 => Family::Sm90,
                other => {
                    return Err(Error::new(Status::InvalidArgument, format!("family = {other}")))
                }
            },
            stages: raw.stages,
            overlap: raw.overlap != 0,
            pingpong: raw.pingpong != 0,
            persistent: raw.persistent != 0,
        })
    }

    /// Checks the kernel template's rules (`fa_kernel_config_validate`).
    pub fn validate(&self) -> Result<()> {
        let raw = self.to_raw();
        // Safety: a valid pointer to an initialised struct.
        check(unsafe { sys::fa_kernel_config_validate(&raw) })
    }

    /// The seed's autotuning filter (`fa_kernel_config_autotune_filter`): `Ok(None)` when kept,
    /// `Ok(Some(rule))` with the rule that drops it.
    pub fn autotune_filter(&self) -> Result<Option<String>> {
        let raw = self.to_raw();
        let mut keep = 0;
        // Safety: valid pointers to an initialised struct and a local.
        check(unsafe { sys::fa_kernel_config_autotune_filter(&raw, &mut keep) })?;
        Ok(if keep == 1 { None } else { Some(last_detail()) })
    }

    /// The config compiled in this one's place when its extra fields are no-ops
    /// (`fa_kernel_config_canonical`).
    pub fn canonical(&self) -> Result<KernelConfig> {
        let raw = self.to_raw();
        let mut out = empty_kernel_config();
        // Safety: valid pointers to initialised structs.
        check(unsafe { sys::fa_kernel_config_canonical(&raw, &mut out) })?;
        KernelConfig::from_raw(&out)
    }

    /// Whether this kernel (or its canonical form) is compiled into the library
    /// (`fa_kernel_is_registered`).
    pub fn is_registered(&self) -> Result<bool> {
        let raw = self.to_raw();
        let mut registered = 0;
        // Safety: valid pointers to an initialised struct and a local.
        check(unsafe { sys::fa_kernel_is_registered(&raw, &mut registered) })?;
        Ok(registered == 1)
    }
}

impl fmt::Display for KernelConfig {
    /// The short name (`fa_kernel_config_name`); a config the library cannot name (an F32
    /// dtype) prints its fields instead.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let raw = self.to_raw();
        let mut needed = 0usize;
        // Safety: a NULL buffer of size 0 only queries the size into a local.
        unsafe { sys::fa_kernel_config_name(&raw, std::ptr::null_mut(), 0, &mut needed) };
        let mut buf = vec![0u8; needed.max(1)];
        // Safety: `buf` is writable for its length; the library writes a NUL-terminated name.
        let status = unsafe {
            sys::fa_kernel_config_name(&raw, buf.as_mut_ptr().cast(), buf.len(), std::ptr::null_mut())
        };
        match CStr::from_bytes_until_nul(&buf) {
            Ok(name) if status == sys::FA_STATUS_SUCCESS => f.write_str(&name.to_string_lossy()),
            _ => write!(f, "{self:?}"),
        }
    }
}

impl std::str::FromStr for KernelConfig {
    type Err = Error;
    /// Parses a short name (`fa_kernel_config_parse`).
    fn from_str(name: &str) -> Result<KernelConfig> {
        let c = CString::new(name).map_err(|_| Error::new(Status::ParseError, "name contains NUL"))?;
        let mut raw = empty_kernel_config();
        // Safety: a NUL-terminated string and a valid pointer to an initialised struct.
        check(unsafe { sys::fa_kernel_config_parse(c.as_ptr(), &mut raw) })?;
        KernelConfig::from_raw(&raw)
    }
}

/// Every GPU kernel compiled into the library, in registry order (`fa_kernel_count`,
/// `fa_kernel_get`).
pub fn kernels() -> Result<Vec<KernelConfig>> {
    // Safety: no arguments; thread-safe.
    let n = unsafe { sys::fa_kernel_count() };
    (0..n)
        .map(|i| {
            let mut raw = empty_kernel_config();
            // Safety: i < count and a valid pointer to an initialised struct.
            check(unsafe { sys::fa_kernel_get(i, &mut raw) })?;
            KernelConfig::from_raw(&raw)
        })
        .collect()
}

// ---- Contexts --------------------------------------------------------------------------------

/// Where a context runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Device {
    /// The CPU backend: host memory.
    Cpu,
    /// The CUDA device with this ordinal: device memory.
    Cuda(i32),
}

/// A raw `cudaStream_t` (`CudaStream::DEFAULT` is the legacy default stream).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CudaStream(pub *mut c_void);

impl CudaStream {
    /// The legacy default stream (NULL).
    pub const DEFAULT: CudaStream = CudaStream(std::ptr::null_mut());
}

/// A libflashattn context (`fa_context_t`): one CUDA device or the CPU, with its kernel choices
/// and tuning results. Freed on drop (`fa_context_destroy`).
pub struct Context {
    raw: NonNull<sys::fa_context_t>,
    device: Device,
}

// Safety: the header documents every function taking a context as thread-safe with respect to
// that context, except fa_context_destroy, which only Drop calls, when no borrow is left.
unsafe impl Send for Context {}
// Safety: as above; shared (&Context) use only reaches the thread-safe functions.
unsafe impl Sync for Context {}

impl Drop for Context {
    fn drop(&mut self) {
        // Safety: the pointer came from fa_context_create and is freed once; plans borrow the
        // context, so none outlives it.
        unsafe { sys::fa_context_destroy(self.raw.as_ptr()) }
    }
}

fn slice_fits<T>(name: &str, slice: &[T], needed: usize) -> Result<()> {
    if slice.len() < needed {
        return Err(Error::new(
            Status::InvalidArgument,
            format!("{name} holds {} elements, but the config spans {needed}", slice.len()),
        ));
    }
    Ok(())
}

/// Checks host slices against the config before the library reads or writes them.
fn check_host<Q: Element, KV: Element, O: Element>(
    config: &Config,
    q: &[Q],
    k: &[KV],
    v: &[KV],
    o: &[O],
    lse: Option<&[f32]>,
) -> Result<()> {
    let types = (config.dtype(), config.kv_dtype(), config.out_dtype());
    if (Q::DTYPE, KV::DTYPE, O::DTYPE) != types {
        return Err(Error::new(
            Status::InvalidArgument,
            format!(
                "slices of (q, k/v, o) = {:?} for a config of {:?}",
                (Q::DTYPE, KV::DTYPE, O::DTYPE),
                types
            ),
        ));
    }
    let e = config.extents()?;
    slice_fits("q", q, e.q)?;
    slice_fits("k", k, e.k)?;
    slice_fits("v", v, e.v)?;
    slice_fits("o", o, e.o)?;
    if let Some(lse) = lse {
        slice_fits("lse", lse, e.lse)?;
    }
    Ok(())
}

impl Context {
    /// Creates a context (`fa_context_create`).
    pub fn new(device: Device) -> Result<Context> {
        let ordinal = match device {
            Device::Cpu => sys::FA_DEVICE_CPU,
            // -1 would silently select the CPU (FA_DEVICE_CPU).
            Device::Cuda(i) if i < 0 => {
                return Err(Error::new(Status::InvalidArgument, format!("CUDA ordinal {i} < 0")))
            }
            Device::Cuda(i) => i,
        };
        let mut raw = std::ptr::null_mut();
        // Safety: a valid out-pointer.
        check(unsafe { sys::fa_context_create(ordinal, &mut raw) })?;
        let raw = NonNull::new(raw).ok_or_else(|| Error::new(Status::InternalError, "NULL context"))?;
        Ok(Context { raw, device })
    }

    /// Where the context runs.
    pub fn device(&self) -> Device {
        self.device
    }

    fn host_only(&self) -> Result<()> {
        match self.device {
            Device::Cpu => Ok(()),
            Device::Cuda(_) => Err(Error::new(
                Status::WrongContext,
                "host slices need a CPU context; use forward_device on a GPU context",
            )),
        }
    }

    /// Attention on host slices through the CPU backend (`fa_forward`). The slices must span
    /// the config's layout (checked) and match its dtype; `lse` is `[batch, heads_q, seqlen_q]`.
    pub fn forward<T: Element>(
        &self,
        config: &Config,
        q: &[T],
        k: &[T],
        v: &[T],
        o: &mut [T],
        lse: Option<&mut [f32]>,
    ) -> Result<()> {
        self.host_only()?;
        check_host(config, q, k, v, o, lse.as_deref())?;
        let lse = lse.map_or(std::ptr::null_mut(), |l| l.as_mut_ptr());
        // Safety: a CPU context reads q, k, v and writes o and lse within the extents checked
        // above, during the call only.
        check(unsafe {
            sys::fa_forward(
                self.raw.as_ptr(),
                &config.raw,
                q.as_ptr().cast(),
                k.as_ptr().cast(),
                v.as_ptr().cast(),
                o.as_mut_ptr().cast(),
                lse,
                std::ptr::null_mut(),
            )
        })
    }

    /// Attention on device memory (`fa_forward`), launched on `stream` without waiting.
    ///
    /// # Safety
    /// The context must be a GPU context. `q`, `k`, `v` and `o` must be device pointers on the
    /// context's device, valid for the extents of `config` ([`Config::extents`]) in its dtype,
    /// and `lse` NULL or valid for `batch * heads_q * seqlen_q` floats, until the kernel on
    /// `stream` has finished; `o` and `lse` must not be read or written by other work until
    /// then; `stream` must be a stream of that device (or NULL).
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn forward_device(
        &self,
        config: &Config,
        q: *const c_void,
        k: *const c_void,
        v: *const c_void,
        o: *mut c_void,
        lse: *mut f32,
        stream: CudaStream,
    ) -> Result<()> {
        // Safety: the caller guarantees the pointers and the stream (see above).
        check(unsafe {
            sys::fa_forward(self.raw.as_ptr(), &config.raw, q, k, v, o, lse, stream.0.cast())
        })
    }

    /// [`Context::forward`] with the run's index tensors and per-head parameters
    /// (`fa_forward_ex`): varlen batches, KV caches, ALiBi slopes, sinks. Each slice of `args` is
    /// checked against the config; a CPU run also checks their contents.
    #[allow(clippy::too_many_arguments)]
    pub fn forward_ex<T: Element>(
        &self,
        config: &Config,
        q: &[T],
        k: &[T],
        v: &[T],
        o: &mut [T],
        lse: Option<&mut [f32]>,
        args: &RunArgs<'_>,
    ) -> Result<()> {
        self.forward_mixed(config, q, k, v, o, lse, args)
    }

    /// [`Context::forward_ex`] with q, k/v and o of their own element types, as the config's
    /// [`Config::dtype`], [`Config::kv_dtype`] and [`Config::out_dtype`] say (checked): E4M3
    /// inputs with a 16-bit o, or 16-bit queries against an E4M3 cache, descaled by
    /// [`RunArgs::q_descale`] and its siblings.
    #[allow(clippy::too_many_arguments)]
    pub fn forward_mixed<Q: Element, KV: Element, O: Element>(
        &self,
        config: &Config,
        q: &[Q],
        k: &[KV],
        v: &[KV],
        o: &mut [O],
        lse: Option<&mut [f32]>,
        args: &RunArgs<'_>,
    ) -> Result<()> {
        self.host_only()?;
        check_host(config, q, k, v, o, lse.as_deref())?;
        let raw_args = host_run_args(config, args)?;
        let lse = lse.map_or(std::ptr::null_mut(), |l| l.as_mut_ptr());
        // Safety: a CPU context reads q, k, v and the run arguments and writes o and lse, all
        // within the lengths checked above, during the call only.
        check(unsafe {
            sys::fa_forward_ex(
                self.raw.as_ptr(),
                &config.raw,
                q.as_ptr().cast(),
                k.as_ptr().cast(),
                v.as_ptr().cast(),
                o.as_mut_ptr().cast(),
                lse,
                &raw_args,
                std::ptr::null_mut(),
            )
        })
    }

    /// [`Context::forward_device`] with run arguments in device memory and an optional split-KV
    /// workspace (`fa_forward_ex`). With `num_splits` 0 the keys are split only when the
    /// workspace holds what the split needs; a forced split without it fails with
    /// [`Status::WorkspaceTooSmall`].
    ///
    /// # Safety
    /// As [`Context::forward_device`]; every non-NULL pointer of `args` must be device memory of
    /// the length the config implies (see [`RunArgs`]), valid until the kernels finish.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn forward_device_ex(
        &self,
        config: &Config,
        q: *const c_void,
        k: *const c_void,
        v: *const c_void,
        o: *mut c_void,
        lse: *mut f32,
        args: &DeviceRunArgs,
        stream: CudaStream,
    ) -> Result<()> {
        let raw_args = args.to_raw();
        // Safety: the caller guarantees the pointers and the stream (see above).
        check(unsafe {
            sys::fa_forward_ex(self.raw.as_ptr(), &config.raw, q, k, v, o, lse, &raw_args, stream.0.cast())
        })
    }

    /// Merges two partial results over disjoint key sets of the same queries into the result
    /// over their union (`fa_merge_states`), on host slices (CPU context):
    /// `lse = log(exp(lse_a) + exp(lse_b))`, `o = exp(lse_a - lse) o_a + exp(lse_b - lse) o_b`.
    #[allow(clippy::too_many_arguments)]
    pub fn merge_states<T: Element>(
        &self,
        config: &MergeConfig,
        o_a: &[T],
        lse_a: &[f32],
        o_b: &[T],
        lse_b: &[f32],
        o: &mut [T],
        lse: &mut [f32],
    ) -> Result<()> {
        self.host_only()?;
        if T::DTYPE.raw() != config.raw.dtype {
            return Err(Error::new(Status::InvalidArgument, format!("slices of {:?} for a merge of another dtype", T::DTYPE)));
        }
        let (span, rows) = config.spans();
        for (name, len, needed) in [("o_a", o_a.len(), span), ("o_b", o_b.len(), span), ("o", o.len(), span)]
            .into_iter()
            .chain([("lse_a", lse_a.len(), rows), ("lse_b", lse_b.len(), rows), ("lse", lse.len(), rows)])
        {
            if len < needed {
                return Err(Error::new(Status::InvalidArgument, format!("{name} holds {len} elements, but the merge spans {needed}")));
            }
        }
        // Safety: a CPU context reads and writes within the spans checked above, during the call.
        check(unsafe {
            sys::fa_merge_states(
                self.raw.as_ptr(),
                &config.raw,
                o_a.as_ptr().cast(),
                lse_a.as_ptr(),
                o_b.as_ptr().cast(),
                lse_b.as_ptr(),
                o.as_mut_ptr().cast(),
                lse.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        })
    }

    /// [`Context::merge_states`] on device memory, launched on `stream` (`fa_merge_states`).
    /// `o` may be `o_a` or `o_b` and `lse` may be `lse_a` or `lse_b` (in place).
    ///
    /// # Safety
    /// A GPU context; the pointers must be device memory on its device spanning the merge's
    /// tensors, valid and not otherwise written until the kernel on `stream` finishes.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn merge_states_device(
        &self,
        config: &MergeConfig,
        o_a: *const c_void,
        lse_a: *const f32,
        o_b: *const c_void,
        lse_b: *const f32,
        o: *mut c_void,
        lse: *mut f32,
        stream: CudaStream,
    ) -> Result<()> {
        // Safety: the caller guarantees the pointers and the stream.
        check(unsafe {
            sys::fa_merge_states(self.raw.as_ptr(), &config.raw, o_a, lse_a, o_b, lse_b, o, lse, stream.0.cast())
        })
    }

    /// A plan for `config` bound to this context's choice of kernel (`fa_plan_create`).
    pub fn plan(&self, config: &Config) -> Result<Plan<'_>> {
        let mut raw = std::ptr::null_mut();
        // Safety: valid context and config pointers and an out-pointer.
        check(unsafe { sys::fa_plan_create(self.raw.as_ptr(), &config.raw, &mut raw) })?;
        Plan::wrap(raw, self, config)
    }

    /// A plan pinned to `kernel` (`fa_plan_create_with_kernel`).
    pub fn plan_with_kernel(&self, config: &Config, kernel: &KernelConfig) -> Result<Plan<'_>> {
        let k = kernel.to_raw();
        let mut raw = std::ptr::null_mut();
        // Safety: valid pointers and an out-pointer.
        check(unsafe {
            sys::fa_plan_create_with_kernel(self.raw.as_ptr(), &config.raw, &k, &mut raw)
        })?;
        Plan::wrap(raw, self, config)
    }

    /// Records `kernel` as this context's choice for `config`'s shape (`fa_context_set_kernel`).
    pub fn set_kernel(&self, config: &Config, kernel: &KernelConfig) -> Result<()> {
        let k = kernel.to_raw();
        // Safety: valid pointers.
        check(unsafe { sys::fa_context_set_kernel(self.raw.as_ptr(), &config.raw, &k) })
    }

    /// Times the candidate kernels on the caller's device buffers and records the fastest
    /// (`fa_autotune`); returns it and its median milliseconds. Waits for `stream`.
    ///
    /// # Safety
    /// As [`Context::forward_device`]; `o` (and `lse`) are overwritten.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn autotune(
        &self,
        config: &Config,
        q: *const c_void,
        k: *const c_void,
        v: *const c_void,
        o: *mut c_void,
        lse: *mut f32,
        stream: CudaStream,
    ) -> Result<(KernelConfig, f32)> {
        let mut best = empty_kernel_config();
        let mut ms = 0f32;
        // Safety: the caller guarantees the pointers and the stream; best and ms are locals.
        check(unsafe {
            sys::fa_autotune(
                self.raw.as_ptr(),
                &config.raw,
                q,
                k,
                v,
                o,
                lse,
                stream.0.cast(),
                &mut best,
                &mut ms,
            )
        })?;
        Ok((KernelConfig::from_raw(&best)?, ms))
    }

    /// Writes the tuning results to `path` (`fa_context_save_tuning`).
    pub fn save_tuning(&self, path: &Path) -> Result<()> {
        let c = path_cstring(path)?;
        // Safety: a valid context and a NUL-terminated path.
        check(unsafe { sys::fa_context_save_tuning(self.raw.as_ptr(), c.as_ptr()) })
    }

    /// Loads a tuning file (`fa_context_load_tuning`). `Ok(None)` when every entry loaded,
    /// `Ok(Some(detail))` when stale entries were skipped (the others are loaded).
    pub fn load_tuning(&self, path: &Path) -> Result<Option<String>> {
        let c = path_cstring(path)?;
        // Safety: a valid context and a NUL-terminated path.
        match check(unsafe { sys::fa_context_load_tuning(self.raw.as_ptr(), c.as_ptr()) }) {
            Ok(()) => Ok(None),
            Err(e) if e.status == Status::TuningEntriesIgnored => Ok(Some(e.detail)),
            Err(e) => Err(e),
        }
    }

    /// Shapes with a tuned kernel (`fa_context_tuned_count`).
    pub fn tuned_count(&self) -> Result<usize> {
        let mut n = 0usize;
        // Safety: a valid context and a local.
        check(unsafe { sys::fa_context_tuned_count(self.raw.as_ptr(), &mut n) })?;
        Ok(n)
    }
}

fn path_cstring(path: &Path) -> Result<CString> {
    // The path's own bytes: lossy UTF-8 would name another file.
    use std::os::unix::ffi::OsStrExt;
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| Error::new(Status::InvalidArgument, "path contains NUL"))
}

// ---- Plans -----------------------------------------------------------------------------------

/// A validated problem bound to one kernel (`fa_plan_t`); it borrows its context, so it cannot
/// outlive it:
///
/// ```compile_fail
/// use flashattn::{Config, Context, DType, Device};
/// let config = Config::builder(DType::F32, 1, 4, 4, 1, 1, 8).build().unwrap();
/// let plan = {
///     let ctx = Context::new(Device::Cpu).unwrap();
///     ctx.plan(&config).unwrap() // error: `ctx` does not live long enough
/// };
/// ```
pub struct Plan<'ctx> {
    raw: NonNull<sys::fa_plan_t>,
    config: Config,
    device: Device,
    _ctx: PhantomData<&'ctx Context>,
}

// Safety: the header documents fa_plan_run and the plan queries as thread-safe ("one plan may be
// run from several threads at once"); fa_plan_destroy runs only in Drop.
unsafe impl Send for Plan<'_> {}
// Safety: as above.
unsafe impl Sync for Plan<'_> {}

impl Drop for Plan<'_> {
    fn drop(&mut self) {
        // Safety: the pointer came from fa_plan_create* and is freed once, before its context.
        unsafe { sys::fa_plan_destroy(self.raw.as_ptr()) }
    }
}

impl<'ctx> Plan<'ctx> {
    fn wrap(raw: *mut sys::fa_plan_t, ctx: &'ctx Context, config: &Config) -> Result<Plan<'ctx>> {
        let raw = NonNull::new(raw).ok_or_else(|| Error::new(Status::InternalError, "NULL plan"))?;
        Ok(Plan { raw, config: *config, device: ctx.device, _ctx: PhantomData })
    }

    /// The GPU kernel the plan runs (`fa_plan_kernel`); `None` for a CPU plan.
    pub fn kernel(&self) -> Result<Option<KernelConfig>> {
        if self.device == Device::Cpu {
            return Ok(None);
        }
        let mut raw = empty_kernel_config();
        // Safety: a valid plan and an initialised struct.
        check(unsafe { sys::fa_plan_kernel(self.raw.as_ptr(), &mut raw) })?;
        KernelConfig::from_raw(&raw).map(Some)
    }

    /// Device scratch bytes a GPU run needs (`fa_plan_workspace_size`): 0 unless the plan splits
    /// the keys ([`Plan::num_splits`] > 1) or is an FP8 prefill that transposes V ahead of the
    /// run (which, given no workspace, runs a kernel that transposes V itself: 0.79-0.89x as
    /// fast from 8k keys on an H200).
    pub fn workspace_size(&self) -> Result<usize> {
        let mut n = 0usize;
        // Safety: a valid plan and a local.
        check(unsafe { sys::fa_plan_workspace_size(self.raw.as_ptr(), &mut n) })?;
        Ok(n)
    }

    /// Runs a CPU plan on host slices (`fa_plan_run`), checked as [`Context::forward`].
    pub fn run<T: Element>(
        &self,
        q: &[T],
        k: &[T],
        v: &[T],
        o: &mut [T],
        lse: Option<&mut [f32]>,
    ) -> Result<()> {
        if self.device != Device::Cpu {
            return Err(Error::new(Status::WrongContext, "host slices need a CPU plan"));
        }
        check_host(&self.config, q, k, v, o, lse.as_deref())?;
        let lse = lse.map_or(std::ptr::null_mut(), |l| l.as_mut_ptr());
        // Safety: a CPU plan reads q, k, v and writes o and lse within the checked extents,
        // during the call only.
        check(unsafe {
            sys::fa_plan_run(
                self.raw.as_ptr(),
                q.as_ptr().cast(),
                k.as_ptr().cast(),
                v.as_ptr().cast(),
                o.as_mut_ptr().cast(),
                lse,
                std::ptr::null_mut(),
                0,
                std::ptr::null_mut(),
            )
        })
    }

    /// Runs a GPU plan on device memory (`fa_plan_run`): a launch only, capturable in a CUDA
    /// graph.
    ///
    /// # Safety
    /// As [`Context::forward_device`]; `workspace` must hold [`Plan::workspace_size`] bytes of
    /// device memory (or be NULL when that is 0).
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn run_device(
        &self,
        q: *const c_void,
        k: *const c_void,
        v: *const c_void,
        o: *mut c_void,
        lse: *mut f32,
        workspace: *mut c_void,
        workspace_size: usize,
        stream: CudaStream,
    ) -> Result<()> {
        // Safety: the caller guarantees the pointers, the workspace and the stream.
        check(unsafe {
            sys::fa_plan_run(
                self.raw.as_ptr(),
                q,
                k,
                v,
                o,
                lse,
                workspace,
                workspace_size,
                stream.0.cast(),
            )
        })
    }

    /// How many thread blocks share each sequence's keys (`fa_plan_num_splits`; 1 is unsplit).
    pub fn num_splits(&self) -> Result<i32> {
        let mut n = 0i32;
        // Safety: a valid plan and a local.
        check(unsafe { sys::fa_plan_num_splits(self.raw.as_ptr(), &mut n) })?;
        Ok(n)
    }

    /// Runs a CPU plan with run arguments (`fa_plan_run_ex`), checked as [`Context::forward_ex`].
    pub fn run_ex<T: Element>(
        &self,
        q: &[T],
        k: &[T],
        v: &[T],
        o: &mut [T],
        lse: Option<&mut [f32]>,
        args: &RunArgs<'_>,
    ) -> Result<()> {
        if self.device != Device::Cpu {
            return Err(Error::new(Status::WrongContext, "host slices need a CPU plan"));
        }
        check_host(&self.config, q, k, v, o, lse.as_deref())?;
        let raw_args = host_run_args(&self.config, args)?;
        let lse = lse.map_or(std::ptr::null_mut(), |l| l.as_mut_ptr());
        // Safety: a CPU plan reads and writes within the checked lengths, during the call only.
        check(unsafe {
            sys::fa_plan_run_ex(
                self.raw.as_ptr(),
                q.as_ptr().cast(),
                k.as_ptr().cast(),
                v.as_ptr().cast(),
                o.as_mut_ptr().cast(),
                lse,
                &raw_args,
                std::ptr::null_mut(),
            )
        })
    }

    /// Runs a GPU plan with run arguments and workspace in `args` (`fa_plan_run_ex`): a launch
    /// only, capturable in a CUDA graph whose replays may see new index tensor contents.
    ///
    /// # Safety
    /// As [`Context::forward_device_ex`].
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn run_device_ex(
        &self,
        q: *const c_void,
        k: *const c_void,
        v: *const c_void,
        o: *mut c_void,
        lse: *mut f32,
        args: &DeviceRunArgs,
        stream: CudaStream,
    ) -> Result<()> {
        let raw_args = args.to_raw();
        // Safety: the caller guarantees the pointers, the workspace and the stream.
        check(unsafe {
            sys::fa_plan_run_ex(self.raw.as_ptr(), q, k, v, o, lse, &raw_args, stream.0.cast())
        })
    }
}
