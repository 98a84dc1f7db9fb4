import { policy as inner } from './policy.js';
export const policy = {
  info: () => inner.info(),
  handle(event) {
    try {
      return inner.handle(event);
    } catch (e) {
      if (typeof e === 'string') throw e;
      if (e && e.stack) console.error(e.stack);
      throw String(e);
    }
  },
};
