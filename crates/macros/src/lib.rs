//! `#[kernel]`: the attribute that turns one Rust function into a multi-GPU kernel; and
//! `paste_idents!`, which lets a `macro_rules!` name one kernel per element type.
//!
//! Used through `symmem_device::kernel`; see its documentation for the rules a kernel
//! function follows. The expansion refers to `::symmem_device`, so a kernel crate
//! depends on `symmem-device` under that name.

use proc_macro::TokenStream;
use proc_macro2::{Delimiter, Group, Ident, Span, TokenStream as TokenStream2, TokenTree};
use quote::{format_ident, quote};
use syn::spanned::Spanned;
use syn::{Error, FnArg, GenericParam, ItemFn, Pat, Type, parse_macro_input};

/// Declares a kernel. The function's first parameter is the arch handle (`&A` for a
/// generic `A: Arch`, or `&impl Arch`); every other parameter's type implements
/// `symmem_device::Param` (integers, floats, `*mut T`, `*const T`, `PeerTable`, and the
/// views `View<T>`, `ViewMut<T>`, `SymView<T>`, `SymViewMut<T>`, which it knows by those
/// names: each crosses the ABI as two or three primitives).
///
/// On `amdgpu` and `nvptx64` it expands to the exported
/// `#[unsafe(no_mangle)] pub unsafe extern "gpu-kernel" fn NAME(..)` (each parameter as
/// its primitives), calling the body with the target's arch handle. On every other
/// target it expands to `pub const NAME`: the kernel's name and crate for the GPU
/// backends, and the same body for CPU threads, which a host launch checks its arguments
/// against. A safe `fn` becomes a `symmem_device::Kernel<(T1, T2, ..)>`, which
/// `symmem::Module::launch` takes from safe code: its parameters' types are its whole
/// contract. An `unsafe fn` (its `# Safety` section a contract the types do not keep)
/// becomes a `symmem_device::UnsafeKernel<..>`, which only the `unsafe`
/// `Module::launch_unchecked` takes: the macro never discharges a contract it cannot
/// check.
#[proc_macro_attribute]
pub fn kernel(attr: TokenStream, item: TokenStream) -> TokenStream {
    if !attr.is_empty() {
        return Error::new(Span::call_site(), "#[kernel] takes no arguments")
            .to_compile_error()
            .into();
    }
    let function = parse_macro_input!(item as ItemFn);
    expand(function)
        .unwrap_or_else(Error::into_compile_error)
        .into()
}

fn expand(function: ItemFn) -> syn::Result<TokenStream2> {
    let sig = &function.sig;
    if let Some(asyncness) = sig.asyncness {
        return Err(Error::new(asyncness.span(), "a kernel cannot be async"));
    }
    if let Some(abi) = &sig.abi {
        return Err(Error::new(abi.span(), "#[kernel] writes the ABI itself"));
    }
    if let syn::ReturnType::Type(_, ty) = &sig.output {
        return Err(Error::new(ty.span(), "a kernel returns nothing"));
    }
    if let Some(variadic) = &sig.variadic {
        return Err(Error::new(variadic.span(), "a kernel cannot be variadic"));
    }
    let type_params = sig
        .generics
        .params
        .iter()
        .filter(|p| !matches!(p, GenericParam::Lifetime(_)))
        .count();
    if type_params > 1
        || sig
            .generics
            .params
            .iter()
            .any(|p| matches!(p, GenericParam::Const(_)))
    {
        return Err(Error::new(
            sig.generics.span(),
            "a kernel has one generic type parameter at most: its arch handle's type",
        ));
    }
    let mut inputs = sig.inputs.iter();
    match inputs.next() {
        Some(FnArg::Typed(arch)) if matches!(*arch.ty, Type::Reference(_)) => {}
        other => {
            let span = other.map_or(sig.span(), Spanned::span);
            return Err(Error::new(
                span,
                "a kernel's first parameter is its arch handle: `arch: &A` (A: Arch) or `arch: &impl Arch`",
            ));
        }
    }
    let mut names = Vec::new();
    let mut types = Vec::new();
    // The entry point's parameters (each kernel parameter's primitives) and, per kernel
    // parameter, the tuple of them that `Param::from_abi` takes.
    let mut entry_params = Vec::new();
    let mut entry_tuples = Vec::new();
    for (i, input) in inputs.enumerate() {
        let FnArg::Typed(typed) = input else {
            return Err(Error::new(input.span(), "a kernel takes no `self`"));
        };
        if !matches!(&*typed.pat, Pat::Ident(_) | Pat::Wild(_)) {
            return Err(Error::new(
                typed.pat.span(),
                "kernel parameters are plain names",
            ));
        }
        let ty = (*typed.ty).clone();
        let parts: Vec<Ident> = (0..primitives(&ty))
            .map(|j| format_ident!("__symmem_arg{}_{}", i, j))
            .collect();
        for (j, part) in parts.iter().enumerate() {
            let j = syn::Index::from(j);
            entry_params.push(quote! {
                #part: <<#ty as ::symmem_device::Param>::Abi as ::symmem_device::AbiPart<#j>>::Part
            });
        }
        entry_tuples.push(quote!((#(#parts,)*)));
        names.push(format_ident!("__symmem_arg{}", i));
        types.push(ty);
    }
    let name = &sig.ident;
    let name_text = name.to_string();
    let vis = &function.vis;
    let attrs = &function.attrs;
    let body_name = format_ident!("__symmem_kernel_body_{}", name);
    let mut body = function.clone();
    body.sig.ident = body_name.clone();
    body.vis = syn::Visibility::Inherited;
    body.attrs.retain(|a| !a.path().is_ident("doc"));
    let gpu = quote!(any(target_arch = "amdgpu", target_arch = "nvptx64"));
    // The arguments rebuilt from the ABI: what a launch lowered from `symmem::KernelArg`s
    // of these very parameter types, whose contract is what `from_abi` asks.
    let rebuilt = quote! {
        #(
            // SAFETY: the host lowered this argument from a `symmem::KernelArg` of the
            // parameter's type (its contract is `from_abi`'s), passed here unchanged.
            let #names = unsafe { <#types as ::symmem_device::Param>::from_abi(#entry_tuples) };
        )*
    };
    let host_rebuilt = quote! {
        #(
            // SAFETY: as on a GPU: the launch lowered it from a `symmem::KernelArg` of the
            // parameter's type.
            let #names = unsafe { <#types as ::symmem_device::Param>::from_abi(#names) };
        )*
    };
    // A safe `fn` is called as one: its parameters' types are its contract. An `unsafe
    // fn` is only ever launched by `Module::launch_unchecked`, whose caller states that
    // the arguments meet its `# Safety` section: that statement, not the macro, makes the
    // call sound.
    let (call, host_call, handle) = if sig.unsafety.is_some() {
        (
            quote! {
                // SAFETY: launched through `symmem::Module::launch_unchecked` (the only
                // launch of an `UnsafeKernel`), whose caller stated that these arguments
                // meet the kernel's `# Safety` section.
                unsafe { #body_name(&::symmem_device::Gpu, #(#names),*) }
            },
            quote! {
                // SAFETY: as on a GPU: launched through `Module::launch_unchecked`.
                unsafe { #body_name(arch, #(#names),*) }
            },
            quote!(::symmem_device::UnsafeKernel),
        )
    } else {
        (
            quote!(#body_name(&::symmem_device::Gpu, #(#names),*)),
            quote!(#body_name(arch, #(#names),*)),
            quote!(::symmem_device::Kernel),
        )
    };
    Ok(quote! {
        #[doc(hidden)]
        #[inline(always)]
        #[allow(non_snake_case, clippy::too_many_arguments)]
        #body

        #[cfg(#gpu)]
        #(#attrs)*
        #[unsafe(no_mangle)]
        #[allow(clippy::too_many_arguments)]
        pub unsafe extern "gpu-kernel" fn #name(#(#entry_params),*) {
            #rebuilt
            #call
        }

        #[cfg(not(#gpu))]
        #(#attrs)*
        #[allow(non_upper_case_globals)]
        #vis const #name: #handle<(#(#types,)*)> = {
            fn host(
                arch: &::symmem_device::arch::host::HostThread<'_>,
                (#(#names,)*): <(#(#types,)*) as ::symmem_device::Params>::Abi,
            ) {
                #host_rebuilt
                #host_call
            }
            // SAFETY: `host` runs the body of the entry point exported as `#name`, with
            // the same parameters; a safe `fn`'s body is sound for any arguments of its
            // types, an `unsafe fn`'s is launched only as `UnsafeKernel`s are.
            unsafe { #handle::new(env!("CARGO_CRATE_NAME"), #name_text, host) }
        };

        #[cfg(all(target_os = "linux", not(#gpu)))]
        const _: () = {
            #[used]
            #[unsafe(link_section = "symmem_kernels")]
            static DECLARATION: ::symmem_device::Declaration = ::symmem_device::Declaration {
                crate_name: env!("CARGO_CRATE_NAME"),
                name: #name_text,
                slots: <(#(#types,)*) as ::symmem_device::Params>::SLOTS,
            };
        };
    })
}

/// How many ABI primitives a parameter of type `ty` crosses as: two for `View<T>` and
/// `ViewMut<T>` (address, length), three for `SymView<T>` and `SymViewMut<T>` (and the
/// peer table), one for every other type. Known by the type's name, the last segment of
/// its path: a proc macro sees no types. A wrong count (a view behind an alias) is a
/// compile error in the expansion (`AbiPart` has no such part), never a wrong launch.
fn primitives(ty: &Type) -> usize {
    let Type::Path(path) = ty else { return 1 };
    match path
        .path
        .segments
        .last()
        .map(|s| s.ident.to_string())
        .as_deref()
    {
        Some("View" | "ViewMut") => 2,
        Some("SymView" | "SymViewMut") => 3,
        _ => 1,
    }
}

/// Expands to its input with every `[< a b .. >]` replaced by one identifier, the
/// identifiers `a`, `b`, .. joined (`_` is an identifier too): the one thing a
/// `macro_rules!` cannot do itself, so that it can name an item per element type, as in
/// `[<symmem_all_reduce_one_shot_ $op _ $suffix>]` (the `[<..>]` form of the `paste`
/// crate, without its modifiers). Every other token, bracket groups included, passes
/// through unchanged. A `[<..>]` holding anything but identifiers is an error.
#[proc_macro]
pub fn paste_idents(input: TokenStream) -> TokenStream {
    paste(input.into())
        .unwrap_or_else(Error::into_compile_error)
        .into()
}

/// `tokens` with every `[<..>]` joined, groups walked recursively.
fn paste(tokens: TokenStream2) -> syn::Result<TokenStream2> {
    let mut out = TokenStream2::new();
    for tree in tokens {
        let tree = match tree {
            TokenTree::Group(group) => match joined(&group)? {
                Some(ident) => TokenTree::Ident(ident),
                None => {
                    let mut walked = Group::new(group.delimiter(), paste(group.stream())?);
                    walked.set_span(group.span());
                    TokenTree::Group(walked)
                }
            },
            other => other,
        };
        out.extend([tree]);
    }
    Ok(out)
}

/// The identifier `group` names if it is a `[<..>]`, else `None`.
fn joined(group: &Group) -> syn::Result<Option<Ident>> {
    if group.delimiter() != Delimiter::Bracket {
        return Ok(None);
    }
    let trees: Vec<TokenTree> = group.stream().into_iter().collect();
    let is =
        |tree: Option<&TokenTree>, c| matches!(tree, Some(TokenTree::Punct(p)) if p.as_char() == c);
    if trees.len() < 3 || !is(trees.first(), '<') || !is(trees.last(), '>') {
        return Ok(None);
    }
    let mut name = String::new();
    for tree in &trees[1..trees.len() - 1] {
        part(tree, &mut name)?;
    }
    Ok(Some(Ident::new(&name, trees[1].span())))
}

/// Appends the identifier `tree` is to `name`; a `macro_rules!` fragment arrives as a
/// group without delimiters around it.
fn part(tree: &TokenTree, name: &mut String) -> syn::Result<()> {
    match tree {
        TokenTree::Ident(ident) => name.push_str(&ident.to_string()),
        TokenTree::Group(group) if group.delimiter() == Delimiter::None => {
            for inner in group.stream() {
                part(&inner, name)?;
            }
        }
        other => {
            return Err(Error::new(other.span(), "`[<..>]` joins identifiers only"));
        }
    }
    Ok(())
}
