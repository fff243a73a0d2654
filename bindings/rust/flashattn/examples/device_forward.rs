//! Forward on device memory: bf16 attention on GPU 0, compared with the CPU backend on the same
//! data. The CUDA runtime is opened at run time (dlopen), so the example builds anywhere and
//! reports "skipped" where there is no runtime or GPU.
//!
//!     cargo run --release --example device_forward
use std::ffi::{c_char, c_int, c_void, CString};

use flashattn::{Bf16, Config, Context, CudaStream, DType, Device};

extern "C" {
    fn dlopen(filename: *const c_char, flags: c_int) -> *mut c_void;
    fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
}
const RTLD_NOW: c_int = 2;

type MallocFn = unsafe extern "C" fn(*mut *mut c_void, usize) -> c_int;
type FreeFn = unsafe extern "C" fn(*mut c_void) -> c_int;
type MemcpyFn = unsafe extern "C" fn(*mut c_void, *const c_void, usize, c_int) -> c_int;
type SynchronizeFn = unsafe extern "C" fn() -> c_int;
type DeviceCountFn = unsafe extern "C" fn(*mut c_int) -> c_int;

struct Cuda {
    malloc: MallocFn,
    free: FreeFn,
    memcpy: MemcpyFn,
    synchronize: SynchronizeFn,
    device_count: DeviceCountFn,
}
const H2D: c_int = 1;
const D2H: c_int = 2;

fn open_cuda() -> Option<Cuda> {
    for name in ["libcudart.so", "libcudart.so.13", "libcudart.so.12", "/usr/local/cuda/lib64/libcudart.so"] {
        let c = CString::new(name).unwrap();
        // Safety: dlopen with a NUL-terminated name; a NULL result is handled.
        let handle = unsafe { dlopen(c.as_ptr(), RTLD_NOW) };
        if handle.is_null() {
            continue;
        }
        let sym = |s: &str| {
            let c = CString::new(s).unwrap();
            // Safety: a live handle and a NUL-terminated symbol name.
            let p = unsafe { dlsym(handle, c.as_ptr()) };
            assert!(!p.is_null(), "{s} missing from {name}");
            p
        };
        // Safety: each symbol has the CUDA runtime's documented signature.
        return Some(unsafe {
            Cuda {
                malloc: std::mem::transmute::<*mut c_void, MallocFn>(sym("cudaMalloc")),
                free: std::mem::transmute::<*mut c_void, FreeFn>(sym("cudaFree")),
                memcpy: std::mem::transmute::<*mut c_void, MemcpyFn>(sym("cudaMemcpy")),
                synchronize: std::mem::transmute::<*mut c_void, SynchronizeFn>(sym("cudaDeviceSynchronize")),
                device_count: std::mem::transmute::<*mut c_void, DeviceCountFn>(sym("cudaGetDeviceCount")),
            }
        });
    }
    None
}

fn main() -> Result<(), flashattn::Error> {
    let Some(cuda) = open_cuda() else {
        println!("skipped: no CUDA runtime library found");
        return Ok(());
    };
    let mut devices = 0;
    // Safety: a valid out-pointer.
    if unsafe { (cuda.device_count)(&mut devices) } != 0 || devices == 0 {
        println!("skipped: no CUDA device");
        return Ok(());
    }
    let gpu = Context::new(Device::Cuda(0))?;
    let cpu = Context::new(Device::Cpu)?;
    let (batch, sq, sk, hq, hkv, d) = (2i64, 1013i64, 1024i64, 8i64, 2i64, 128i64);
    let config = Config::builder(DType::Bf16, batch, sq, sk, hq, hkv, d).causal(true).build()?;
    let e = config.extents()?;
    let make = |n: usize, m: usize| -> Vec<Bf16> {
        (0..n).map(|i| Bf16::from_f32(((i * m % 251) as f32 - 125.0) / 128.0)).collect()
    };
    let (q, k, v) = (make(e.q, 31), make(e.k, 17), make(e.v, 13));
    let mut expected = vec![Bf16::default(); e.o];
    cpu.forward(&config, &q, &k, &v, &mut expected, None)?;

    let bytes = |n: usize| n * std::mem::size_of::<Bf16>();
    let mut dev = [std::ptr::null_mut::<c_void>(); 4];
    for (ptr, n) in dev.iter_mut().zip([e.q, e.k, e.v, e.o]) {
        // Safety: a valid out-pointer; the size is the tensor's extent in bytes.
        assert_eq!(unsafe { (cuda.malloc)(ptr, bytes(n)) }, 0, "cudaMalloc");
    }
    for (ptr, host) in dev.iter().zip([&q, &k, &v]) {
        // Safety: the device buffer holds the host slice's bytes.
        assert_eq!(unsafe { (cuda.memcpy)(*ptr, host.as_ptr().cast(), bytes(host.len()), H2D) }, 0);
    }
    // Safety: device pointers on GPU 0 spanning the config's extents, alive until after the
    // synchronisation below; the legacy default stream.
    unsafe { gpu.forward_device(&config, dev[0], dev[1], dev[2], dev[3], std::ptr::null_mut(), CudaStream::DEFAULT)? };
    let plan = gpu.plan(&config)?;
    let mut o = vec![Bf16::default(); e.o];
    // Safety: as above (the plan's run overwrites o with the same result).
    unsafe {
        plan.run_device(dev[0], dev[1], dev[2], dev[3], std::ptr::null_mut(), std::ptr::null_mut(), 0, CudaStream::DEFAULT)?;
        assert_eq!((cuda.synchronize)(), 0, "cudaDeviceSynchronize");
        assert_eq!((cuda.memcpy)(o.as_mut_ptr().cast(), dev[3], bytes(e.o), D2H), 0);
    }
    let worst = o.iter().zip(&expected).map(|(a, b)| (a.to_f32() - b.to_f32()).abs()).fold(0f32, f32::max);
    println!("GPU kernel {}", plan.kernel()?.expect("a GPU plan has a kernel"));
    println!("bf16 causal GQA attention on device memory, batch {batch}, Sq {sq}, Sk {sk}, heads {hq}/{hkv}, d {d}");
    println!("max abs difference from the CPU backend: {worst:.2e} (two bf16 roundings of |o| < 1: bound 8e-3)");
    drop(plan);
    for ptr in dev {
        // Safety: each pointer came from cudaMalloc and is freed once, after the last use.
        unsafe { (cuda.free)(ptr) };
    }
    assert!(worst <= 8e-3);
    Ok(())
}
