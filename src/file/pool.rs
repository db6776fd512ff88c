//! The one way this layer runs blocking engine calls off the JS thread: a closure on the libuv
//! pool (one hop out, one back), resolving a promise with its value.

use napi::bindgen_prelude::{ToNapiValue, TypeName};
use napi::{Env, Task};

/// A blocking call for the libuv pool.
pub struct OnPool<J> {
    work: Option<Box<dyn FnOnce() -> J + Send>>,
}

impl<J> OnPool<J> {
    pub fn new(work: impl FnOnce() -> J + Send + 'static) -> Self {
        OnPool {
            work: Some(Box::new(work)),
        }
    }
}

impl<J: ToNapiValue + TypeName + Send + 'static> Task for OnPool<J> {
    type Output = J;
    type JsValue = J;

    fn compute(&mut self) -> napi::Result<J> {
        match self.work.take() {
            Some(work) => Ok(work()),
            None => Err(napi::Error::from_reason("a pool task ran twice")),
        }
    }

    fn resolve(&mut self, _env: Env, output: J) -> napi::Result<J> {
        Ok(output)
    }
}
