//! Caller input never panics the crate (issue 14): sizes whose products overflow i64 come back
//! as errors, in debug builds (overflow checks on) as in release.
use flashattn::{Config, Context, DType, Device, Layout, MergeConfig, RunArgs, Status};

const HUGE: i64 = 1 << 40;

// Defect 12: Layout::Bhsd multiplied heads x seqlen x head_dim unchecked ("attempt to multiply
// with overflow" in debug builds).
#[test]
fn bhsd_layout_of_overflowing_sizes_is_an_error() {
    let err = Config::builder(DType::F32, 1, HUGE, 1, HUGE, 1, HUGE)
        .layout(Layout::Bhsd)
        .build()
        .err()
        .expect("sizes of 2^120 elements must be refused");
    assert_eq!(err.status(), Status::InvalidArgument);
    assert!(err.to_string().contains("Bhsd"), "{err}");
    let err = Config::builder(DType::F32, 1, 1, HUGE, 1, HUGE, HUGE).layout(Layout::Bhsd).build().err().unwrap();
    assert_eq!(err.status(), Status::InvalidArgument);
    // A later layout replaces the failed one.
    let ok = Config::builder(DType::F32, 1, 2, 3, 2, 1, 4).layout(Layout::Bhsd).build();
    assert!(ok.is_ok());
}

// Defect 13: Context::merge_states multiplied the packed strides unchecked.
#[test]
fn merge_states_of_overflowing_sizes_is_an_error() {
    let ctx = Context::new(Device::Cpu).unwrap();
    let (o, l) = (vec![0f32; 4], vec![0f32; 1]);
    let (mut out, mut lse) = (vec![0f32; 4], vec![0f32; 1]);
    for config in [
        MergeConfig::new(DType::F32, 1, HUGE, HUGE, HUGE),
        MergeConfig::new(DType::F32, HUGE, HUGE, HUGE, 1).o_strides(1, 1, 1),
        MergeConfig::new(DType::F32, i64::MAX, 2, 1, 4),
    ] {
        let err = ctx.merge_states(&config, &o, &l, &o, &l, &mut out, &mut lse).unwrap_err();
        assert_eq!(err.status(), Status::InvalidArgument, "{err}");
    }
    assert_eq!(out, vec![0f32; 4]);
}

// Run arguments of a config at the validation bounds: lengths are compared, never overflowed.
#[test]
fn run_args_at_the_bounds_are_errors() {
    let ctx = Context::new(Device::Cpu).unwrap();
    let config = Config::builder(DType::F32, (1 << 60) - 1, 1, 1, 1, 1, 4).varlen(1, 1).build().unwrap();
    let (q, mut o) = (vec![0f32; 4], vec![0f32; 4]);
    let cu = [0, 1];
    let args = RunArgs { cu_seqlens_q: Some(&cu), cu_seqlens_k: Some(&cu), ..Default::default() };
    let err = ctx.forward_ex(&config, &q, &q, &q, &mut o, None, &args).unwrap_err();
    assert_eq!(err.status(), Status::InvalidArgument, "{err}");
}
