//! Finds libflashattn, links it, and generates the declarations from its header.
use std::env;
use std::path::{Path, PathBuf};

struct Found {
    lib_dir: PathBuf,
    include_dir: PathBuf,
}

fn has_library(dir: &Path) -> bool {
    dir.join("libflashattn.so").exists() || dir.join("libflashattn.dylib").exists()
}

fn from_env(tried: &mut Vec<String>) -> Option<Found> {
    let lib_dir = PathBuf::from(env::var_os("FLASHATTN_LIB_DIR")?);
    let include_dir = env::var_os("FLASHATTN_INCLUDE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| lib_dir.join("..").join("include"));
    if has_library(&lib_dir) && include_dir.join("flashattn.h").exists() {
        return Some(Found { lib_dir, include_dir });
    }
    tried.push(format!(
        "FLASHATTN_LIB_DIR={} / FLASHATTN_INCLUDE_DIR={}: libflashattn.so or flashattn.h missing",
        lib_dir.display(),
        include_dir.display()
    ));
    None
}

fn from_pkg_config(tried: &mut Vec<String>) -> Option<Found> {
    match pkg_config::Config::new().atleast_version("0.2").cargo_metadata(false).probe("flashattn") {
        Ok(lib) => {
            let lib_dir = lib.link_paths.first().cloned()?;
            let include_dir = lib.include_paths.first().cloned()?;
            Some(Found { lib_dir, include_dir })
        }
        Err(e) => {
            tried.push(format!("pkg-config flashattn: {}", e.to_string().lines().next().unwrap_or("")));
            None
        }
    }
}

fn from_build_tree(tried: &mut Vec<String>) -> Option<Found> {
    // bindings/rust/flashattn-sys -> the repository root.
    let root = PathBuf::from(env::var("CARGO_MANIFEST_DIR").ok()?).join("../../..");
    let lib_dir = root.join("build");
    let include_dir = root.join("include");
    if has_library(&lib_dir) && include_dir.join("flashattn.h").exists() {
        return Some(Found { lib_dir, include_dir });
    }
    tried.push(format!(
        "the repository's build tree {}: no libflashattn.so (build it: cmake -S . -B build && cmake --build build)",
        lib_dir.display()
    ));
    None
}

fn main() {
    for var in ["FLASHATTN_LIB_DIR", "FLASHATTN_INCLUDE_DIR", "PKG_CONFIG_PATH"] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    let mut tried = Vec::new();
    let found = from_env(&mut tried)
        .or_else(|| from_pkg_config(&mut tried))
        .or_else(|| from_build_tree(&mut tried))
        .unwrap_or_else(|| {
            panic!("libflashattn not found. Tried, in order:\n  {}\n", tried.join("\n  "))
        });

    println!("cargo:rustc-link-search=native={}", found.lib_dir.display());
    println!("cargo:rustc-link-lib=dylib=flashattn");
    // Dependents read these as DEP_FLASHATTN_LIB_DIR / DEP_FLASHATTN_INCLUDE_DIR.
    println!("cargo:lib_dir={}", found.lib_dir.display());
    println!("cargo:include_dir={}", found.include_dir.display());

    let header = found.include_dir.join("flashattn.h");
    println!("cargo:rerun-if-changed={}", header.display());
    let bindings = bindgen::Builder::default()
        .header(header.to_string_lossy())
        .allowlist_function("fa_.*")
        .allowlist_type("fa_.*")
        .allowlist_var("FA_.*")
        // Plain constants: a status value a newer library adds is still representable.
        .default_enum_style(bindgen::EnumVariation::Consts)
        .prepend_enum_name(false)
        .size_t_is_usize(true)
        .generate()
        .expect("bindgen failed on flashattn.h");
    let out = PathBuf::from(env::var("OUT_DIR").unwrap()).join("bindings.rs");
    bindings.write_to_file(&out).expect("cannot write the bindings");
}
