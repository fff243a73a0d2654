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
//! Tensors are `[batch, seq, heads, head_dim]` with the last dimension contiguous.
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

/// The loaded library's version, e.g. `"0.2.0"` (`fa_version_string`).
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
}

impl DType {
    fn raw(self) -> i32 {
        (match self {
            DType::F16 => sys::FA_DTYPE_FP16,
            DType::Bf16 => sys::FA_DTYPE_BF16,
            DType::F32 => sys::FA_DTYPE_FP32,
        }) as i32
    }
    fn from_raw(raw: i32) -> Option<DType> {
        match raw as sys::fa_dtype {
            sys::FA_DTYPE_FP16 => Some(DType::F16),
            sys::FA_DTYPE_BF16 => Some(DType::Bf16),
            sys::FA_DTYPE_FP32 => Some(DType::F32),
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
mod private {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for super::F16 {}
    impl Sealed for super::Bf16 {}
}

// ---- Problems --------------------------------------------------------------------------------

/// One attention problem (`fa_config`), validated by the library when built.
#[derive(Clone, Copy)]
pub struct Config {
    raw: sys::fa_config,
}

/// Builds a [`Config`]; [`ConfigBuilder::build`] validates it (`fa_config_validate`).
#[derive(Clone, Copy)]
pub struct ConfigBuilder {
    raw: sys::fa_config,
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
    /// lse: batch * heads_q * seqlen_q
    pub lse: usize,
}

impl Config {
    /// Starts a config with packed strides, non-causal, scale 1/sqrt(head_dim).
    /// q is `[batch, seqlen_q, heads_q, head_dim]`, k and v `[batch, seqlen_k, heads_kv, head_dim]`.
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
        ConfigBuilder { raw }
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        DType::from_raw(self.raw.dtype).expect("validated")
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
    /// q's (batch, seq, head) strides in elements.
    pub fn q_strides(mut self, batch: i64, seq: i64, head: i64) -> Self {
        (self.raw.q_batch_stride, self.raw.q_seq_stride, self.raw.q_head_stride) = (batch, seq, head);
        self
    }
    /// k's (batch, seq, head) strides in elements.
    pub fn k_strides(mut self, batch: i64, seq: i64, head: i64) -> Self {
        (self.raw.k_batch_stride, self.raw.k_seq_stride, self.raw.k_head_stride) = (batch, seq, head);
        self
    }
    /// v's (batch, seq, head) strides in elements.
    pub fn v_strides(mut self, batch: i64, seq: i64, head: i64) -> Self {
        (self.raw.v_batch_stride, self.raw.v_seq_stride, self.raw.v_head_stride) = (batch, seq, head);
        self
    }
    /// o's (batch, seq, head) strides in elements.
    pub fn o_strides(mut self, batch: i64, seq: i64, head: i64) -> Self {
        (self.raw.o_batch_stride, self.raw.o_seq_stride, self.raw.o_head_stride) = (batch, seq, head);
        self
    }
    /// Validates (`fa_config_validate`): the error names the offending field and value.
    pub fn build(self) -> Result<Config> {
        // Safety: a valid pointer to an initialised config.
        check(unsafe { sys::fa_config_validate(&self.raw) })?;
        Ok(Config { raw: self.raw })
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
fn check_host<T: Element>(
    config: &Config,
    q: &[T],
    k: &[T],
    v: &[T],
    o: &[T],
    lse: Option<&[f32]>,
) -> Result<()> {
    if T::DTYPE != config.dtype() {
        return Err(Error::new(
            Status::InvalidArgument,
            format!("slices of {:?} for a config of {:?}", T::DTYPE, config.dtype()),
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

    /// Device scratch bytes `run_device` needs (`fa_plan_workspace_size`; 0 in this version).
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
}
