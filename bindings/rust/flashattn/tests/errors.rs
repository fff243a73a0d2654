//! Every status maps to its variant and back; real failures carry the library's detail.
use std::path::Path;

use flashattn::{sys, Config, Context, DType, Device, Family, KernelConfig, Status};

#[test]
fn every_status_value_maps_both_ways() {
    assert_eq!(Status::from_raw(sys::FA_STATUS_SUCCESS), None);
    let all = [
        (sys::FA_STATUS_INVALID_ARGUMENT, Status::InvalidArgument),
        (sys::FA_STATUS_BAD_STRUCT_SIZE, Status::BadStructSize),
        (sys::FA_STATUS_UNSUPPORTED, Status::Unsupported),
        (sys::FA_STATUS_INVALID_KERNEL_CONFIG, Status::InvalidKernelConfig),
        (sys::FA_STATUS_KERNEL_NOT_AVAILABLE, Status::KernelNotAvailable),
        (sys::FA_STATUS_PARSE_ERROR, Status::ParseError),
        (sys::FA_STATUS_NO_DEVICE, Status::NoDevice),
        (sys::FA_STATUS_ARCH_MISMATCH, Status::ArchMismatch),
        (sys::FA_STATUS_CUDA_ERROR, Status::CudaError),
        (sys::FA_STATUS_OUT_OF_MEMORY, Status::OutOfMemory),
        (sys::FA_STATUS_WORKSPACE_TOO_SMALL, Status::WorkspaceTooSmall),
        (sys::FA_STATUS_WRONG_CONTEXT, Status::WrongContext),
        (sys::FA_STATUS_INTERNAL_ERROR, Status::InternalError),
        (sys::FA_STATUS_IO_ERROR, Status::IoError),
        (sys::FA_STATUS_TUNING_ENTRIES_IGNORED, Status::TuningEntriesIgnored),
    ];
    for (raw, status) in all {
        assert_eq!(Status::from_raw(raw), Some(status));
        assert_eq!(status.raw(), raw);
    }
    assert_eq!(Status::from_raw(999), Some(Status::Other(999)));
    assert_eq!(Status::Other(999).raw(), 999);
}

#[test]
fn invalid_configs_name_the_field() {
    let e = Config::builder(DType::F32, 1, 4, 4, 6, 4, 8).build().err().unwrap();
    assert_eq!(e.status(), Status::InvalidArgument);
    assert!(e.detail().contains("heads_q = 6 is not a multiple of heads_kv = 4"), "{e}");
    assert!(e.to_string().starts_with("FA_STATUS_INVALID_ARGUMENT"), "{e}");
    let e = Config::builder(DType::F32, 0, 4, 4, 1, 1, 8).build().err().unwrap();
    assert!(e.detail().contains("batch = 0"), "{e}");
    let e = Config::builder(DType::F32, 1, 4, 4, 1, 1, 8).softmax_scale(f32::NAN).build().err().unwrap();
    assert!(e.detail().contains("softmax_scale"), "{e}");
    // Two heads 4 elements apart overlap in o.
    let e = Config::builder(DType::F32, 1, 4, 4, 2, 2, 8).o_strides(64, 16, 4).build().err().unwrap();
    assert!(e.detail().contains("overlap"), "{e}");
    let e = Config::builder(DType::F32, 1, 4, 4, 1, 1, 8).k_strides(64, -8, 8).build().err().unwrap();
    assert!(e.detail().contains("k_seq_stride = -8"), "{e}");
}

#[test]
fn host_slices_are_checked_before_the_call() {
    let ctx = Context::new(Device::Cpu).unwrap();
    let config = Config::builder(DType::F32, 1, 4, 4, 1, 1, 8).build().unwrap();
    let (q, k, v) = (vec![1f32; 32], vec![1f32; 32], vec![1f32; 31]);
    let mut o = vec![7f32; 32];
    let e = ctx.forward(&config, &q, &k, &v, &mut o, None).err().unwrap();
    assert_eq!(e.status(), Status::InvalidArgument);
    assert!(e.detail().contains("v holds 31 elements"), "{e}");
    assert!(o.iter().all(|&x| x == 7.0), "o untouched");
    let mut lse = vec![0f32; 3];
    let e = ctx.forward(&config, &q, &k, &q, &mut o, Some(&mut lse)).err().unwrap();
    assert!(e.detail().contains("lse holds 3"), "{e}");
    let half = Config::builder(DType::Bf16, 1, 4, 4, 1, 1, 8).build().unwrap();
    let e = ctx.forward(&half, &q, &k, &q, &mut o, None).err().unwrap();
    assert!(e.detail().contains("F32"), "{e}");
}

#[test]
fn devices_kernels_and_tuning_report_their_status() {
    let e = Context::new(Device::Cuda(1 << 20)).err().unwrap();
    assert_eq!(e.status(), Status::NoDevice);
    for ordinal in [-1, -5] {
        let e = Context::new(Device::Cuda(ordinal)).err().unwrap();
        assert_eq!(e.status(), Status::InvalidArgument);
    }

    let e = "(BF16, 128, 64, 64, 4): warp+load_0_0_0_tiles".parse::<KernelConfig>().err().unwrap();
    assert_eq!(e.status(), Status::ParseError);
    assert!(e.detail().contains("warp"), "{e}");
    let bad: KernelConfig = "(BF16, 96, 64, 64, 4): load_0_0_0_tiles".parse().unwrap();
    let e = bad.validate().err().unwrap();
    assert_eq!(e.status(), Status::InvalidKernelConfig);
    assert!(e.detail().contains("d_head = 96"), "{e}");
    let hopper: KernelConfig = "(BF16, 128, 128, 128, 12): sm90+stages_3+overlap".parse().unwrap();
    assert_eq!((hopper.family, hopper.stages, hopper.overlap), (Family::Sm90, 3, true));
    assert!(!hopper.async_copy && hopper.q_mma_load_k_tiles == 0);
    hopper.validate().unwrap();
    assert_eq!(hopper.to_string(), "(BF16, 128, 128, 128, 12): sm90+stages_3+overlap");
    let e = KernelConfig { stages: 5, ..hopper }.validate().err().unwrap();
    assert!(e.detail().contains("stages = 5"), "{e}");
    let turns: KernelConfig =
        "(BF16, 128, 128, 128, 12): sm90+stages_2+pingpong+persistent".parse().unwrap();
    assert!(turns.pingpong && turns.persistent && !turns.overlap);
    turns.validate().unwrap();
    let e = KernelConfig { n_warps: 8, b_r: 64, ..turns }.validate().err().unwrap();
    assert!(e.detail().contains("pingpong"), "{e}");
    let dropped: KernelConfig = "(BF16, 128, 128, 64, 4): async+eager+swizzled+load_0_0_0_tiles".parse().unwrap();
    assert_eq!((dropped.family, dropped.stages, dropped.overlap), (Family::MmaSync, 0, false));
    assert!(dropped.autotune_filter().unwrap().unwrap().contains("B_r = 128"));

    let ctx = Context::new(Device::Cpu).unwrap();
    let config = Config::builder(DType::F32, 1, 4, 4, 1, 1, 8).build().unwrap();
    let e = ctx.plan_with_kernel(&config, &dropped).err().unwrap();
    assert_eq!(e.status(), Status::WrongContext);
    let e = ctx.set_kernel(&config, &dropped).err().unwrap();
    assert_eq!(e.status(), Status::WrongContext);
    let e = ctx.save_tuning(Path::new("tuning.txt")).err().unwrap();
    assert_eq!(e.status(), Status::WrongContext);
    let e = ctx.load_tuning(Path::new("tuning.txt")).err().unwrap();
    assert_eq!(e.status(), Status::WrongContext);
    assert_eq!(ctx.tuned_count().unwrap(), 0);
}

#[test]
fn registry_listing_round_trips_through_names() {
    let kernels = flashattn::kernels().unwrap();
    if kernels.is_empty() {
        // Only a library built without CUDA (FA_CUDA=OFF) has no kernel, and it says so.
        let e = Context::new(Device::Cuda(0)).err().unwrap();
        assert_eq!(e.status(), Status::NoDevice);
        assert!(e.detail().contains("built without CUDA"), "{}", e.detail());
        return;
    }
    for k in &kernels {
        let name = k.to_string();
        assert_eq!(name.parse::<KernelConfig>().unwrap(), *k);
        assert!(k.is_registered().unwrap());
        assert_eq!(k.canonical().unwrap(), *k);
        k.validate().unwrap();
    }
    assert_eq!(flashattn::version(), "0.3.0");
    // A config the library cannot name still displays (its fields).
    let mut f32_config = kernels[0];
    f32_config.dtype = DType::F32;
    assert!(f32_config.to_string().contains("F32"));
}
