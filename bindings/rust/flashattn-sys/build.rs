//! Finds libflashattn (or builds the bundled sources), links it, and generates the declarations
//! from its header.
use std::env;
use std::path::{Path, PathBuf};

struct Found {
    lib_dir: PathBuf,
    include_dir: PathBuf,
}

fn has_library(dir: &Path) -> bool {
    dir.join("libflashattn.so").exists() || dir.join("libflashattn.dylib").exists()
}

/// The repository root: this crate lives in bindings/rust/flashattn-sys. A crate published on
/// crates.io would carry a copy of the sources (CMakeLists.txt, cmake/, include/, src/,
/// tools/generate_kernels.py) inside its own directory instead, and point this at it.
fn source_root() -> PathBuf {
    PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("set by cargo")).join("../../..")
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
            // A .pc file can name directories that do not hold the library (one written for
            // another prefix, or copied away from its install): check before bindgen reads them,
            // and fall back to the next way, saying why.
            let lib_dir = lib.link_paths.iter().find(|d| has_library(d)).cloned();
            let include_dir = lib.include_paths.iter().find(|d| d.join("flashattn.h").exists()).cloned();
            match (lib_dir, include_dir) {
                (Some(lib_dir), Some(include_dir)) => Some(Found { lib_dir, include_dir }),
                (lib_dir, include_dir) => {
                    let mut missing = Vec::new();
                    if lib_dir.is_none() {
                        missing.push(format!("libflashattn.so in its -L {:?}", lib.link_paths));
                    }
                    if include_dir.is_none() {
                        missing.push(format!("flashattn.h in its -I {:?}", lib.include_paths));
                    }
                    let why = format!(
                        "pkg-config flashattn: the .pc file (PKG_CONFIG_PATH={}) names no {}",
                        env::var("PKG_CONFIG_PATH").unwrap_or_default(),
                        missing.join(" and no ")
                    );
                    println!("cargo:warning=flashattn-sys: {why}; trying the next way");
                    tried.push(why);
                    None
                }
            }
        }
        Err(e) => {
            tried.push(format!("pkg-config flashattn: {}", e.to_string().lines().next().unwrap_or("")));
            None
        }
    }
}

fn from_build_tree(tried: &mut Vec<String>) -> Option<Found> {
    let root = source_root();
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

/// Builds the library alone (no tests, examples or benchmark) with CMake into OUT_DIR: the
/// default kernel set (the README's "full build" times), or with no CUDA compiler found the CPU
/// backend alone (FA_CUDA=OFF), said in a cargo warning. FLASHATTN_CMAKE_ARGS adds
/// `-DNAME=VALUE` definitions, e.g. the quick kernel set (`-DFA_KERNEL_SET=progression
/// -DFA_DTYPES=bf16 -DFA_HEAD_DIMS=128 -DFA_CUDA_ARCHS=80`) or `-DFA_CUDA=OFF`.
#[cfg(feature = "bundled")]
fn bundled(tried: &mut Vec<String>) -> Option<Found> {
    let root = source_root();
    if !root.join("CMakeLists.txt").exists() {
        tried.push(format!("the bundled sources: no CMakeLists.txt in {}", root.display()));
        return None;
    }
    for input in ["CMakeLists.txt", "cmake", "include", "src", "tools/generate_kernels.py"] {
        println!("cargo:rerun-if-changed={}", root.join(input).display());
    }
    println!("cargo:rerun-if-env-changed=FLASHATTN_CMAKE_ARGS");
    let mut cmake = cmake::Config::new(&root);
    // Release whatever cargo's profile: its debug profile would build the CPU backend at -O0.
    cmake
        .profile("Release")
        .define("FA_BUILD_TESTS", "OFF")
        .define("FA_BUILD_EXAMPLES", "OFF")
        .define("FA_BUILD_BENCH", "OFF")
        .define("CMAKE_INSTALL_LIBDIR", "lib")
        .define("CMAKE_INSTALL_INCLUDEDIR", "include");
    for arg in env::var("FLASHATTN_CMAKE_ARGS").unwrap_or_default().split_whitespace() {
        let definition = arg.strip_prefix("-D").unwrap_or(arg);
        let (name, value) = definition.split_once('=').unwrap_or_else(|| {
            panic!("FLASHATTN_CMAKE_ARGS: '{arg}' is not -DNAME=VALUE")
        });
        cmake.define(name, value);
    }
    let prefix = cmake.build();
    let cache = std::fs::read_to_string(prefix.join("build/CMakeCache.txt")).unwrap_or_default();
    if cache.lines().any(|line| line == "FA_CUDA:BOOL=OFF") {
        println!(
            "cargo:warning=flashattn-sys: built libflashattn without CUDA (no CUDA compiler found, \
             or FA_CUDA=OFF): the CPU backend only; Device::Cuda contexts fail with Status::NoDevice. \
             Install the CUDA Toolkit 12+ (nvcc) and rebuild for the GPU kernels."
        );
    }
    Some(Found { lib_dir: prefix.join("lib"), include_dir: prefix.join("include") })
}

#[cfg(not(feature = "bundled"))]
fn bundled(tried: &mut Vec<String>) -> Option<Found> {
    tried.push("the bundled sources: the `bundled` feature is off".to_string());
    None
}

/// The directory to link from. Cargo puts link directories inside the target directory on the
/// loader path of `cargo run` and `cargo test` (and drops those outside it), so a library found
/// elsewhere is linked through symbolic links in OUT_DIR: programs of any crate depending on this
/// one then run under cargo with nothing set. The bundled build already lies in OUT_DIR.
fn link_dir(found: &Found) -> PathBuf {
    let out = PathBuf::from(env::var("OUT_DIR").expect("set by cargo"));
    if found.lib_dir.starts_with(&out) {
        return found.lib_dir.clone();
    }
    let links = out.join("link");
    let _ = std::fs::remove_dir_all(&links);
    std::fs::create_dir_all(&links).expect("cannot create OUT_DIR/link");
    let entries = std::fs::read_dir(&found.lib_dir).expect("the library's directory is readable");
    for entry in entries.flatten() {
        let name = entry.file_name();
        if name.to_string_lossy().starts_with("libflashattn.") {
            let link = links.join(&name);
            std::os::unix::fs::symlink(entry.path(), &link)
                .unwrap_or_else(|e| panic!("cannot create the link {}: {e}", link.display()));
        }
    }
    links
}

fn main() {
    for var in ["FLASHATTN_LIB_DIR", "FLASHATTN_INCLUDE_DIR", "PKG_CONFIG_PATH"] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    let mut tried = Vec::new();
    let found = from_env(&mut tried)
        .or_else(|| from_pkg_config(&mut tried))
        .or_else(|| from_build_tree(&mut tried))
        .or_else(|| bundled(&mut tried))
        .unwrap_or_else(|| {
            panic!("libflashattn not found. Tried, in order:\n  {}\n", tried.join("\n  "))
        });

    println!("cargo:rustc-link-search=native={}", link_dir(&found).display());
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
