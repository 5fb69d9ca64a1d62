/**
 * An OpenTelemetry context manager on Node's AsyncLocalStorage, so `context.with` carries the
 * active context across awaits in the tests (what an SDK's context manager does in an app).
 */
import { AsyncLocalStorage } from "node:async_hooks";
import { ROOT_CONTEXT, context, type Context, type ContextManager } from "@opentelemetry/api";

class AsyncLocalStorageContextManager implements ContextManager {
  private readonly storage = new AsyncLocalStorage<Context>();

  active(): Context {
    return this.storage.getStore() ?? ROOT_CONTEXT;
  }

  with<A extends unknown[], F extends (...args: A) => ReturnType<F>>(ctx: Context, fn: F, thisArg?: ThisParameterType<F>, ...args: A): ReturnType<F> {
    return this.storage.run(ctx, () => fn.call(thisArg, ...args));
  }

  bind<T>(ctx: Context, target: T): T {
    if (typeof target !== "function") return target;
    const run = (...args: unknown[]) => this.with(ctx, () => (target as (...a: unknown[]) => unknown)(...args));
    return run as T;
  }

  enable(): this {
    return this;
  }

  disable(): this {
    this.storage.disable();
    return this;
  }
}

export function registerContextManager(): void {
  context.setGlobalContextManager(new AsyncLocalStorageContextManager());
}
