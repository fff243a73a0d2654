//! Lets this crate's tests and examples find libflashattn at run time without LD_LIBRARY_PATH,
//! when it was found outside the loader's default paths (e.g. this repository's build tree).
fn main() {
    if let Ok(dir) = std::env::var("DEP_FLASHATTN_LIB_DIR") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    }
}
